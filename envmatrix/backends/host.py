"""The current interpreter: `envmatrix probe` and quick runs where the host already has the stack."""

from __future__ import annotations

import sys
from pathlib import Path

from ..plan.builds import Build
from . import Prepared, ProcessBackend


class HostBackend(ProcessBackend):
    """Runs every cell with sys.executable; the record's environment facts say what really ran."""

    name = "host"

    def prepare(self, build: Build, log: Path) -> Prepared:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"host backend: cells of {build.build_id} run in {sys.executable}\n")
        return Prepared(python=sys.executable, seconds=0.0, reused=True, facts={"tool": "host"})
