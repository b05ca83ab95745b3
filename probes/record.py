"""The probe's output side: result.json (written atomically, again at every stage), metrics.jsonl and
progress lines. Standard library only, so the first result.json is on disk before torch is imported."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

PROBE_VERSION = "1"


class ProbeInputError(Exception):
    """Input the probe cannot run (an unknown model folder, a family this transformers lacks): a clear
    one-line error in result.json and on stderr, no traceback, and its own exit status."""

    exit_code = 2


def write_json(path: Path, data: Any) -> None:
    """Atomic write: a probe killed mid-write leaves the previous complete file."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str, allow_nan=True))
    os.replace(tmp, path)


@dataclass
class Run:
    """One probe run's state: where it writes, which rank it is, and the result it has so far."""

    out: Path
    rank: int
    world: int
    options: dict[str, Any]
    t0: float = field(default_factory=time.perf_counter)
    result: dict[str, Any] = field(default_factory=dict)
    metrics: TextIO | None = None

    def __post_init__(self) -> None:
        self.result = {
            "probe_version": PROBE_VERSION,
            "rank": self.rank,
            "pid": os.getpid(),
            "world_size": self.world,
            "options": dict(self.options),
            "finished": False,
            "stage": "import",
            "steps_completed": 0,
            "first_nonfinite_step": None,
            "timings": {},
        }

    @property
    def result_path(self) -> Path:
        return self.out / ("result.json" if self.rank == 0 else f"result.rank{self.rank}.json")

    def save(self) -> None:
        """Persist the result now: a process killed by a signal keeps what it had measured so far."""
        self.result["timings"]["total_s"] = round(time.perf_counter() - self.t0, 3)
        write_json(self.result_path, self.result)

    def stage(self, name: str) -> None:
        self.result["stage"] = name

    def timing(self, key: str, since: float) -> None:
        self.result["timings"][key] = round(time.perf_counter() - since, 3)

    def log(self, text: str) -> None:
        print(f"[rank{self.rank}] {text}", flush=True)

    def emit(self, row: dict[str, Any]) -> None:
        """A metrics row: a progress line on every rank, a metrics.jsonl line on rank 0."""
        line = json.dumps(row, allow_nan=True)
        self.log(line)
        if self.metrics is not None:
            self.metrics.write(line + "\n")
            self.metrics.flush()

    def open_metrics(self) -> None:
        """Start metrics.jsonl (rank 0 only) as training starts: an empty file says no step finished."""
        if self.rank == 0 and self.metrics is None:
            self.metrics = (self.out / "metrics.jsonl").open("w")

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
