"""Backends: prepare an environment once (an image or a venv), then run cells in it.

Every backend is a context manager: leaving the `with` block (normally, on an exception, on Ctrl-C)
stops whatever it still runs and cleans up, so nothing outlives the runner. On entry a backend also
removes what a runner killed with SIGKILL left behind (orphaned probe processes, stale containers).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Protocol

from ..host.gpus import visible_devices
from ..plan.builds import Build
from ..run.execute import Completed, fork_refusal, kill_all, probe_argv, probe_command, run_logged
from ..run.forkclient import LOG_NOTE, HelperPool, run_in_process_helper
from ..spec.matrix import Scenario


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
    fork: bool  # single-process cells forked by a per-environment helper (False: --no-fork)

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
    """Cells as child processes of the runner (host and venv backends), forked by a helper per environment
    that imported torch and transformers once (a DDP cell's ranks too); with `fork` off, or where the helper
    cannot serve, a process per cell (torchrun for DDP)."""

    fork = True
    _helpers: HelperPool | None = None

    @property
    def helpers(self) -> HelperPool:
        if self._helpers is None:
            self._helpers = HelperPool()
        return self._helpers

    def __enter__(self) -> ProcessBackend:
        self.helpers.reopen()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop_all()

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        base = dict(ready.env) or None
        devices = visible_devices(gpu_ids)
        cmd = probe_command(ready.python, scenario, out)
        note = fork_refusal(scenario) if self.fork else None
        if self.fork and note is None:
            argv = probe_argv(scenario, out)
            done = run_in_process_helper(self.helpers, ready.python, base, argv, log, ranks=scenario.world_size, timeout=timeout, overrides=devices, owner=out)
            if isinstance(done, Completed) or self.helpers.stopped:  # stopping (Ctrl-C): start nothing new
                return done if isinstance(done, Completed) else Completed(-signal.SIGKILL, False, 0.0)
            note = done
        env = {**(base or os.environ), **devices} if devices else base
        done = run_logged(cmd, log, timeout=timeout, env=env, owner=out)
        if note is not None:  # the record's log says why this cell was not forked
            with log.open("a") as fh:
                fh.write("\n" + LOG_NOTE.format(reason=note) + "\n")
        launch = "torchrun" if scenario.world_size > 1 else "process"
        launch += f" (fork helper not used: {note})" if note else ""
        return replace(done, launch=launch)

    def stop_all(self) -> None:
        self.helpers.stop_all()
        kill_all()
