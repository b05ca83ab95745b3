"""Backends: prepare an environment once (an image or a venv), then run cells in it.

Every backend is a context manager: leaving the `with` block (normally, on an exception, on Ctrl-C)
stops whatever it still runs and cleans up, so nothing outlives the runner. On entry a backend also
removes what a runner killed with SIGKILL left behind (orphaned probe processes, stale containers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Protocol

from ..execute import Completed, kill_all, probe_command, run_logged
from ..plan import Build
from ..spec import Scenario


@dataclass(frozen=True)
class Prepared:
    """A ready environment: the interpreter cells run with, and what preparing it cost and recorded."""

    python: str
    seconds: float
    reused: bool
    facts: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


class BuildFailed(Exception):
    """An environment could not be prepared; its cells are recorded as build_failed with this message."""


class Backend(Protocol):
    """One small interface for every backend: the runner does not know which one it drives."""

    name: str

    def __enter__(self) -> object: ...

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None: ...

    def prepare(self, build: Build, log: Path) -> Prepared:
        """Create the environment (or reuse it); raise BuildFailed with the failing step."""
        ...

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        """Run one scenario in a prepared environment, output in `out`, all its output into `log`."""
        ...

    def stop_all(self) -> None:
        """Kill every cell still running (Ctrl-C): nothing may outlive the runner."""
        ...


class ProcessBackend:
    """Cells as child processes of the runner (host and venv backends)."""

    def __enter__(self) -> ProcessBackend:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop_all()

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        env = dict(ready.env) or None
        if gpu_ids:
            env = {**(env or {}), "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpu_ids))}
        return run_logged(probe_command(ready.python, scenario, out), log, timeout=timeout, env=env, owner=out)

    def stop_all(self) -> None:
        kill_all()
