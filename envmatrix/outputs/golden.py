"""Two machines, one answer: the expected outcome of every cell of a profile kept in one file (the golden file),
and a run's records compared with it cell by cell.

What is compared is what a user reads from the table: the record's status, its outcome class, whether a control
reproduced, and which cell covered it; never timings, pids or evidence text, which differ between machines.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..jsonio import read_json_bounded, write_json_atomic
from ..records.record import Record, Status

#: A golden file is small (a few hundred cells of a few fields); anything far larger is not one.
MAX_BYTES = 8 << 20
FIELDS = ("status", "class", "control", "covered_by")


def expected(records: Iterable[Record]) -> dict[str, dict[str, Any]]:
    """Each cell's id → the fields compared, from a run's records."""
    rows = {r.id: {"status": Status(r.status).value, "class": r.klass, "control": r.control, "covered_by": r.covered_by} for r in records}
    return dict(sorted(rows.items()))


def write(path: Path, records: Iterable[Record], profile: str) -> dict[str, dict[str, Any]]:
    """Write the golden file from a run's records; returns its cells."""
    cells = expected(records)
    write_json_atomic(path, {"profile": profile, "fields": list(FIELDS), "cells": cells})
    return cells


def read(path: Path) -> dict[str, dict[str, Any]]:
    """The cells of a golden file; InputError (exit 2) for one that is missing, too large or not one."""
    if not path.is_file():
        raise InputError(f"{path}: no golden file; write one from a run with envmatrix golden --update")
    data = read_json_bounded(path, MAX_BYTES, "golden file")
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, dict) or not all(isinstance(v, dict) for v in cells.values()):
        raise InputError(f"{path}: not a golden file (expected {{'cells': {{cell id: {{{', '.join(FIELDS)}}}}}}})")
    return cells


def differences(records: Iterable[Record], golden: dict[str, dict[str, Any]]) -> list[str]:
    """One line per cell whose run differs from the golden file (missing on either side counts), in id order."""
    got = expected(records)
    out = []
    for cell in sorted(set(got) | set(golden)):
        if cell not in got:
            out.append(f"{cell}: in the golden file, not in this run")
        elif cell not in golden:
            out.append(f"{cell}: in this run ({got[cell]['class']}), not in the golden file")
        else:
            changed = [f"{k} {golden[cell].get(k)!r} → {got[cell][k]!r}" for k in FIELDS if golden[cell].get(k) != got[cell][k]]
            if changed:
                out.append(f"{cell}: {'; '.join(changed)}")
    return out
