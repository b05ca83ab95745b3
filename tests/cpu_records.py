"""The cpu profile's own records (tests/data/matrix-records: one real run, 114 cells), as typed records and as a results
folder: what check, lock --best and the badge answer from in the tests."""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

from envmatrix.records.record import Record, cell_stem

RECORDS = Path(__file__).resolve().parent / "data" / "matrix-records" / "cpu-profile-f667aff.jsonl.gz"


@cache
def _raw() -> tuple[str, ...]:
    with gzip.open(RECORDS, "rt", encoding="utf-8", errors="surrogateescape") as fh:
        return tuple(json.dumps(json.loads(line)["record"]) for line in fh)


def cpu_records() -> list[Record]:
    """Every record of the run, read through the record's own validation."""
    return [Record.from_json(json.loads(raw), "cpu-profile") for raw in _raw()]


def cpu_results(folder: Path) -> Path:
    """The records written as a results folder (one file per cell, as the runner names them)."""
    folder.mkdir(parents=True, exist_ok=True)
    for raw in _raw():
        cell = json.loads(raw)["cell"]["id"]
        (folder / f"{cell_stem(cell)}.json").write_text(raw, encoding="utf-8")
    return folder
