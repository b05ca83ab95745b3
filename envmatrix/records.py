"""The per-cell record: one JSON file per cell, written atomically, from which every report is rendered.

Several runners may write into one folder at once: each write goes to a unique temporary name and is
renamed into place, so a reader sees a whole record or none, and no runner's record is lost.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .cells import Cell
from .jsonio import read_json

RECORD_VERSION = 1
LOG_TAIL_BYTES = 8192


def cell_stem(cell_id: str) -> str:
    """A cell id as a file name: `env/scenario` → `env__scenario`."""
    return cell_id.replace("/", "__")


def inputs_hash(cell: Cell, probe_source: bytes, backend: str) -> str:
    """What a cached record depends on: environment, scenario, probe source and backend."""
    payload = json.dumps(
        {"env": cell.env.axes(), "scenario": asdict(cell.scenario), "probe": hashlib.sha256(probe_source).hexdigest(), "backend": backend},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log as text, starting at a line boundary where possible."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return ""
    if size > limit and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]
    return data.decode("utf-8", "replace")


def load_records(*folders: Path) -> list[dict[str, Any]]:
    """Every record in the folders (merging runners' results); unreadable files are skipped, not fatal."""
    records: dict[str, dict[str, Any]] = {}
    for folder in folders:
        for path in sorted(folder.glob("*.json")):
            data = read_json(path)
            if data is not None and "cell" in data:
                records[data["cell"]["id"]] = data
    return list(records.values())
