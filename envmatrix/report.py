"""Results → flat tables (CSV, JSON) and one self-contained HTML compatibility table.

Every artefact is a function of the records alone, so results from several runners (an A100 box, an
H20 box) merge by reading their folders together. Text from logs, outputs and matrix.yaml reaches the
page only through Jinja's autoescaping or `tojson` (which escapes <, > and &), and the page's script
writes it with textContent: a `<script>` in a log shows as text.
"""

from __future__ import annotations

import datetime
import math
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from . import __version__
from .jsonio import write_text_atomic
from .outcomes import glyph
from .records import load_records
from .vetting import vetted_environments

if TYPE_CHECKING:
    import pandas as pd

CLASS_COLOURS = {
    "ok": "#1a7f37",
    "skipped": "#8c959f",
    "garbled_output": "#8250df",
    "nan_loss": "#cf222e",
    "zero_grad": "#bc4c00",
    "grad_lost": "#bf3989",
    "ddp_ready_twice": "#0969da",
    "sigfpe": "#a40e26",
    "import_abi": "#953800",
    "unsupported_gpu": "#6e7781",
    "driver_too_old": "#6e7781",
    "oom": "#cf222e",
    "nccl_error": "#0550ae",
    "timeout": "#9a6700",
    "crash": "#a40e26",
    "error": "#57606a",
    "build_failed": "#24292f",
}
COLUMNS = [
    "id", "env", "build", "cuda", "torch", "transformers", "flash_attn", "gpu", "python", "scenario", "status", "class",
    "evidence", "remedy", "expect", "control", "exit_code", "signal", "timed_out", "prepare_s", "probe_s", "steps",
    "first_grad_norm", "parity_rel_err", "backend", "host", "started", "finished",
]  # fmt: skip


def flat_row(rec: dict[str, Any]) -> dict[str, Any]:
    """One record as one flat row for machines and notebooks."""
    cell, outcome = rec["cell"], rec["outcome"]
    result = rec.get("result") or {}
    metrics = rec.get("metrics") or []
    timings = rec.get("timings") or {}
    return {
        "id": cell["id"],
        **{k: cell.get(k) for k in ("env", "build", "cuda", "torch", "transformers", "flash_attn", "gpu", "python", "scenario")},
        "status": rec.get("status"),
        "class": outcome["class"],
        "evidence": outcome.get("evidence"),
        "remedy": outcome.get("remedy"),
        "expect": cell.get("expect"),
        "control": rec.get("control"),
        "exit_code": rec.get("exit_code"),
        "signal": rec.get("signal"),
        "timed_out": rec.get("timed_out"),
        "prepare_s": timings.get("prepare_s"),
        "probe_s": timings.get("probe_s"),
        "steps": result.get("steps_completed"),
        "first_grad_norm": metrics[0].get("grad_norm") if metrics else None,
        "parity_rel_err": (result.get("parity") or {}).get("rel_err"),
        "backend": rec.get("backend"),
        "host": (rec.get("runner") or {}).get("host"),
        "started": rec.get("started"),
        "finished": rec.get("finished"),
    }


def results_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """All records as a DataFrame with a fixed column order (pandas is imported here: it costs a second)."""
    import pandas as pd

    frame: pd.DataFrame = pd.DataFrame([flat_row(r) for r in records], columns=COLUMNS)
    return frame


def _spark(values: list[Any], width: int = 120, height: int = 28) -> str:
    """SVG polyline points for a small curve; non-finite values are left out."""
    pts = [(i, float(v)) for i, v in enumerate(values) if isinstance(v, (int, float)) and math.isfinite(v)]
    if len(pts) < 2:
        return ""
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    span = (hi - lo) or 1.0
    n = max(len(values) - 1, 1)
    return " ".join(f"{i * width / n:.1f},{height - (v - lo) * height / span:.1f}" for i, v in pts)


def _detail(rec: dict[str, Any]) -> dict[str, Any]:
    metrics = rec.get("metrics") or []
    timings = rec.get("timings") or {}
    outcome = rec["outcome"]
    return {
        "id": rec["cell"]["id"],
        "class": outcome["class"],
        "evidence": outcome.get("evidence") or "",
        "remedy": outcome.get("remedy") or "",
        "also": outcome.get("also") or [],
        "control": rec.get("control"),
        "expect": rec["cell"].get("expect"),
        "timings": f"prepare {timings.get('prepare_s')} s, probe {timings.get('probe_s')} s",
        "exit": f"exit {rec.get('exit_code')}" + (f" ({rec['signal']})" if rec.get("signal") else ""),
        "loss": _spark([m.get("loss") for m in metrics]),
        "grad_norm": _spark([m.get("grad_norm") for m in metrics]),
        "steps": len(metrics),
        "log_tail": (rec.get("log") or {}).get("tail", "")[-4000:],
        "log_path": (rec.get("log") or {}).get("path", ""),
    }


def render_html(records: list[dict[str, Any]], locks: dict[str, str] | None = None) -> str:
    """The compatibility table: rows are environments, columns GPU × scenario, one self-contained page."""
    envs: dict[str, dict[str, Any]] = {}
    columns: list[tuple[str, str]] = []
    cells: dict[tuple[str, str, str], dict[str, Any]] = {}
    for rec in sorted(records, key=lambda r: r["cell"]["id"]):
        c = rec["cell"]
        envs.setdefault(c["build"], {k: c[k] for k in ("build", "cuda", "torch", "transformers", "flash_attn", "python")})
        if (c["gpu"], c["scenario"]) not in columns:
            columns.append((c["gpu"], c["scenario"]))
        cells[(c["build"], c["gpu"], c["scenario"])] = rec
    columns.sort()
    details = {rec["cell"]["id"]: _detail(rec) for rec in records}
    counts = Counter(r["outcome"]["class"] for r in records)
    failed_controls = [r for r in records if r.get("control") == "not reproduced"]
    probe_versions = sorted({str((r.get("result") or {}).get("probe_version")) for r in records if r.get("result")})
    env_loader = jinja2.PackageLoader("envmatrix", "templates")
    page = jinja2.Environment(loader=env_loader, autoescape=True, undefined=jinja2.StrictUndefined).get_template("matrix.html.j2")
    return page.render(
        envs=list(envs.values()),
        columns=columns,
        cells=cells,
        details=details,
        counts=counts.most_common(),
        colours=CLASS_COLOURS,
        glyph=glyph,
        failed_controls=failed_controls,
        vetted=vetted_environments(records),
        locks=locks or {},
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        probe_versions=", ".join(probe_versions) or "n/a",
        total=len(records),
    )


def report_paths(out: Path) -> dict[str, Path]:
    """Where the report's three files go."""
    return {"html": out / "matrix.html", "csv": out / "results.csv", "json": out / "results.json"}


def is_current(results: Path, out: Path) -> bool:
    """Whether the report is newer than every record in `results` (nothing to render again)."""
    paths = report_paths(out)
    if not all(p.exists() for p in paths.values()):
        return False
    oldest_output = min(p.stat().st_mtime for p in paths.values())
    return all(r.stat().st_mtime <= oldest_output for r in results.glob("*.json"))


def write_report(results: list[Path], out: Path) -> dict[str, Path]:
    """Render matrix.html, results.csv and results.json from the records in `results` into `out`."""
    records = load_records(*results)
    out.mkdir(parents=True, exist_ok=True)
    frame = results_frame(records)
    paths = report_paths(out)
    write_text_atomic(paths["csv"], frame.to_csv(index=False))
    write_text_atomic(paths["json"], frame.to_json(orient="records", indent=2))
    locks_dir = out / "locks"
    locks = {p.name: str(p.relative_to(out)) for p in sorted(locks_dir.iterdir())} if locks_dir.is_dir() else {}
    write_text_atomic(paths["html"], render_html(records, locks))
    return paths
