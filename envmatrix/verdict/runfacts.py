"""Gather what a run left in its folder (result.json, metrics.jsonl, the log) into RunFacts for classify."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..records.probe_result import read_probe_result
from .classify import RunFacts
from .logscan import scan_stream
from .remedies import freeze_versions


def read_metrics(path: Path) -> tuple[dict[str, Any], ...]:
    """metrics.jsonl rows; a torn last line (process killed mid-write) is dropped."""
    rows: list[dict[str, Any]] = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return ()
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return tuple(rows)


def gather(
    out_dir: Path | None,
    log_path: Path | None,
    *,
    exit_code: int | None,
    timed_out: bool = False,
    build_failed: str | None = None,
    freeze: Iterable[str] = (),
) -> RunFacts:
    """RunFacts from a probe output folder (None where the probe never ran) and its log; `freeze`: the environment's
    `name==version` lines, where known (a matrix cell), so a name several packages define is the installed one's."""
    scan = None
    if log_path is not None and log_path.exists():
        with log_path.open("rb") as fh:
            scan = scan_stream(fh)
    return RunFacts(
        **({"scan": scan} if scan is not None else {}),
        exit_code=exit_code,
        probe=read_probe_result(out_dir / "result.json") if out_dir else None,
        metrics=read_metrics(out_dir / "metrics.jsonl") if out_dir else (),
        timed_out=timed_out,
        build_failed=build_failed,
        installed=freeze_versions(freeze),
    )
