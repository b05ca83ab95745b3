"""The current interpreter: `envmatrix probe` and quick runs where the host already has the stack."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import TracebackType

from probes import caches

from ..plan.builds import Build
from . import Prepared, ProcessBackend


class HostBackend(ProcessBackend):
    """Runs every cell with sys.executable; the record's environment facts say what really ran. The
    caches of its cells (probes/caches.py) live in a folder of this run, removed when it ends: nothing
    is read from or written to the user's home, and a run sees none of an earlier one's caches."""

    name = "host"
    _caches: Path | None = None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            super().__exit__(kind, exc, tb)
        finally:
            if self._caches is not None:
                shutil.rmtree(self._caches, ignore_errors=True)
                self._caches = None

    def prepare(self, build: Build, log: Path) -> Prepared:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"host backend: cells of {build.build_id} run in {sys.executable}\n")
        if self._caches is None:
            self._caches = Path(tempfile.mkdtemp(prefix="envmatrix-host-caches-"))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **caches.variables(self._caches / build.build_id)}
        return Prepared(python=sys.executable, seconds=0.0, reused=True, facts={"tool": "host"}, env=env)
