"""Results → flat tables (CSV, JSON) and one self-contained HTML compatibility table.

Every artefact is a function of the records alone, so results from several runners (an A100 box, an
H20 box) merge by reading their folders together. Text from logs, outputs and matrix.yaml reaches the
page only through Jinja's autoescaping or `tojson` (which escapes <, > and &), and the page's script
writes it with textContent: a `<script>` in a log shows as text.
"""

from __future__ import annotations

import datetime
import json
import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from .. import __version__
from ..records.outcomes import DRIFT, Outcome, table_for_templates
from ..records.provenance import Merged, Provenance, Sourced, from_folders
from ..records.record import Record, Status
from .drift import report as drift_report
from .findings import find, version_order
from .sinks import csv_text
from .vetting import failing_everywhere, fold_text, not_applicable, standings, vetted_environments
from .writer import write_files

if TYPE_CHECKING:
    import pandas as pd

#: The table's rows are sorted by these axes in release order (4.9 before 4.51).
AXIS_ORDER = ("cuda", "torch", "transformers", "flash_attn", "python")
COLUMNS = [
    "id", "env", "build", "cuda", "torch", "transformers", "flash_attn", "gpu", "python", "packages", "scenario", "status", "covered_by", "class",
    "evidence", "remedy", "expect", "control", "exit_code", "signal", "timed_out", "prepare_s", "probe_s", "steps",
    "first_grad_norm", "parity_rel_err", "backend", "host", "started", "finished",
]  # fmt: skip


def flat_row(rec: Record) -> dict[str, Any]:
    """One record as one flat row for machines and notebooks."""
    cell = rec.cell
    grad_norms = rec.metric("grad_norm")
    return {
        "id": cell.id,
        "env": cell.env,
        "build": cell.build,
        **cell.axes(),
        "packages": _packages_text(cell.packages),
        "scenario": cell.scenario,
        "status": rec.status,
        "covered_by": rec.covered_by,
        "class": rec.klass,
        "evidence": rec.outcome.evidence,
        "remedy": rec.outcome.remedy,
        "expect": cell.expect,
        "control": rec.control,
        "exit_code": rec.exit_code,
        "signal": rec.signal,
        "timed_out": rec.timed_out,
        "prepare_s": rec.timings.prepare_s,
        "probe_s": rec.timings.probe_s,
        "steps": rec.steps_completed,
        "first_grad_norm": grad_norms[0] if grad_norms else None,
        "parity_rel_err": rec.parity_rel_err,
        "backend": rec.backend,
        "host": rec.runner.host,
        "started": rec.started,
        "finished": rec.finished,
    }


def _packages_text(packages: Mapping[str, str]) -> str:
    """`trl==1.16.0`: the extra packages a cell installs, in name order."""
    return " ".join(f"{name}=={version}" for name, version in sorted(packages.items()) if version != "none")  # none: not installed


def results_frame(records: list[Record], provenance: Sequence[Provenance] | None = None) -> pd.DataFrame:
    """All records as a DataFrame with a fixed column order (pandas is imported here: it costs a second);
    with `provenance` (one per record), a `provenance` column of objects."""
    import pandas as pd

    frame: pd.DataFrame = pd.DataFrame([flat_row(r) for r in records], columns=COLUMNS)
    if provenance is not None:
        frame["provenance"] = pd.Series([p.as_dict() for p in provenance], index=frame.index, dtype=object)
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


def _detail(rec: Record, provenance: Provenance | None) -> dict[str, Any]:
    t = rec.timings
    return {
        "provenance": provenance.text() if provenance else "",
        "id": rec.id,
        "class": rec.klass,
        "evidence": rec.outcome.evidence,
        "remedy": rec.outcome.remedy,
        "also": list(rec.outcome.also),
        "control": rec.control,
        "expect": rec.expect,
        "timings": f"prepare {t.prepare_s} s, probe {t.probe_s} s",
        "exit": f"exit {rec.exit_code}" + (f" ({rec.signal})" if rec.signal else ""),
        "loss": _spark(rec.metric("loss")),
        "grad_norm": _spark(rec.metric("grad_norm")),
        "steps": len(rec.metrics),
        "log_tail": rec.log.tail[-4000:],
        "log_path": rec.log.path,
    }


def render_html(
    records: list[Record],
    locks: dict[str, str] | None = None,
    previous: list[Record] | None = None,
    *,
    provenance: Mapping[str, Provenance] | None = None,
    apart: Sequence[Sourced] = (),
    trusted: Sequence[str] = (),
) -> str:
    """One self-contained page: findings first (changes since `previous`, what differs and why, the
    controls), then the vetted environments and their locks, then the table (rows environments,
    columns GPU × scenario) where reproduced controls are quiet and a control that did not reproduce is loud.
    Each cell says its provenance; records not verified against a `trusted` signer are listed `apart`."""
    provenance = provenance or {}
    envs: dict[str, dict[str, Any]] = {}
    columns: list[tuple[str, str]] = []
    cells: dict[tuple[str, str, str], Record] = {}
    for rec in sorted(records, key=lambda r: r.id):
        c = rec.cell
        envs.setdefault(
            c.build,
            {
                "build": c.build,
                "cuda": c.cuda,
                "torch": c.torch,
                "transformers": c.transformers,
                "flash_attn": c.flash_attn,
                "python": c.python,
                "packages": _packages_text(c.packages),
            },
        )
        if (c.gpu, c.scenario) not in columns:
            columns.append((c.gpu, c.scenario))
        cells[(c.build, c.gpu, c.scenario)] = rec
    columns.sort()
    na = {r.id for r in records if not_applicable(r)}
    for env in envs.values():
        mine = [r for r in records if r.cell.build == env["build"]]
        env["fold"] = fold_text(len([r for r in mine if r.status != Status.SKIPPED]), len([r for r in mine if r.id in na]))
    details = {rec.id: _detail(rec, provenance.get(rec.id)) for rec in records}
    counts = Counter(r.klass for r in records if r.control != "reproduced" and r.id not in na)  # reproduced controls, n/a: quiet chips
    found = find(records, previous or ())
    drifting = drift_report(records)
    probe_versions = sorted({v for r in records if (v := r.probe_version)})
    env_loader = jinja2.PackageLoader("envmatrix.outputs", "templates")
    page = jinja2.Environment(loader=env_loader, autoescape=True, undefined=jinja2.StrictUndefined).get_template("matrix.html.j2")
    return page.render(
        envs=sorted(envs.values(), key=lambda e: [version_order(e[a]) for a in AXIS_ORDER]),
        columns=columns,
        cells=cells,
        details=details,
        counts=counts.most_common(),
        classes=sorted({r.klass for r in records if r.id not in na}),
        outcomes=table_for_templates(),
        ok=Outcome.OK.value,
        skipped=Outcome.SKIPPED.value,
        inconclusive=Outcome.INCONCLUSIVE.value,
        failure=Outcome.ERROR.value,
        findings=found,
        failed_controls=list(found.controls.failed),
        drift=drifting,
        drifted={c.record.id: c for c in drifting.comparisons if c.drifts},
        drift_kind=DRIFT.as_dict(),
        since=previous is not None,
        standings=[{**v.as_dict(), "vetted": v.vetted, "why_not": v.why_not()} for v in standings(records)],
        fails_everywhere=failing_everywhere(records),
        locks=locks or {},
        generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        version=__version__,
        probe_versions=", ".join(probe_versions) or "n/a",
        total=len(records),
        na=na,
        provenance=provenance,
        apart=sorted(apart, key=lambda row: row.record.id),
        trusted=list(trusted),
    )


def report_paths(out: Path) -> dict[str, Path]:
    """Where the report's three files go."""
    return {"html": out / "matrix.html", "csv": out / "results.csv", "json": out / "results.json", "vetted": out / "vetted.json"}


def is_current(results: Path, out: Path) -> bool:
    """Whether the report is newer than every record in `results` (nothing to render again)."""
    paths = report_paths(out)
    if not all(p.exists() for p in paths.values()):
        return False
    oldest_output = min(p.stat().st_mtime for p in paths.values())
    return all(r.stat().st_mtime <= oldest_output for r in results.glob("*.json"))


def vetted_document(records: list[Record], trusted: Sequence[str] = ()) -> dict[str, object]:
    """`vetted.json`: each environment vetted for something (scenarios, controls reproduced, what fails
    there), and per GPU type the scenarios that fail everywhere (findings about the scenario); with trust,
    the signers whose verified records alone it stands on."""
    document: dict[str, object] = {"vetted": [v.as_dict() for v in vetted_environments(records)], "fails_everywhere": failing_everywhere(records)}
    if trusted:
        document["trusted_signers"] = list(trusted)
    return document


def write_report(results: list[Path], out: Path, warn: Callable[[str], None] | None = None, since: list[Path] | None = None) -> dict[str, Path]:
    """Render matrix.html, results.csv and results.json from the records in `results` into `out`;
    with `since` (an earlier run's results folders), cells whose outcome changed lead the findings."""
    previous = from_folders(since, warn).records if since is not None else None
    return write_merged(from_folders(results, warn), out, previous)


def write_merged(merged: Merged, out: Path, previous: list[Record] | None = None) -> dict[str, Path]:
    """The report of merged folders and sites: the table, findings and vetting stand on the records that
    count (with trust, the verified ones); every row of results.json and results.csv, counted or apart,
    says its provenance. Each file is replaced atomically: a failed write leaves the previous report whole."""
    counted, apart = merged.counted, merged.apart
    records = [row.record for row in counted]
    out.mkdir(parents=True, exist_ok=True)
    rows = counted + apart
    frame = results_frame([row.record for row in rows], [row.provenance for row in rows])
    paths = report_paths(out)
    flat = frame.drop(columns="provenance")
    for column in ("verified", "signer", "source", "standing"):
        flat[column] = [getattr(row.provenance, column) for row in rows]
    locks_dir = out / "locks"
    locks = {p.name: str(p.relative_to(out)) for p in sorted(locks_dir.iterdir())} if locks_dir.is_dir() else {}
    page = render_html(records, locks, previous, provenance=merged.provenance(), apart=apart, trusted=merged.trusted)
    write_files(
        [
            (paths["csv"], csv_text(flat)),
            (paths["json"], frame.to_json(orient="records", indent=2) or "[]"),
            (paths["vetted"], json.dumps(vetted_document(records, merged.trusted), indent=2, default=str)),
            (paths["html"], page),
        ],
        "a report file",
    )
    return paths
