"""Run the probe as a child process: its own process group, output to a log file, a hard timeout.

A cell's hang or crash ends there: the whole group (torchrun and every rank) is killed on timeout or
Ctrl-C, and the caller always gets an exit status back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .spec import Scenario

#: The probe ships beside the package (a checkout) and inside the wheel (as `probes/`).
PROBE = Path(__file__).resolve().parent.parent / "probes" / "grpo_smoke.py"
GRACE_S = 5.0

_ACTIVE: set[subprocess.Popen[bytes]] = set()
_ACTIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Completed:
    """How a child process ended: exit status (negative: signal), whether we killed it, how long it ran."""

    exit_code: int
    timed_out: bool
    seconds: float


def probe_command(python: str, scenario: Scenario, out_dir: Path, probe: Path = PROBE) -> list[str]:
    """The command that runs `scenario` under `python`, through torchrun when it needs several ranks."""
    launcher = [python]
    if scenario.world_size > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={scenario.world_size}"]
    return [*launcher, str(probe), "--out", str(out_dir), *scenario.probe_args()]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole group, then SIGKILL whatever is left after a grace period."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_logged(cmd: list[str], log_path: Path, *, timeout: float, env: dict[str, str] | None = None) -> Completed:
    """Run `cmd` with stdout+stderr into `log_path`; kill its process group at `timeout` seconds."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        with _ACTIVE_LOCK:
            _ACTIVE.add(proc)
        try:
            code = proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            code, timed_out = proc.wait(), True
            log.write(f"\n[envmatrix] killed after the {timeout:g} s timeout\n".encode())
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.discard(proc)
    return Completed(code, timed_out, round(time.monotonic() - start, 3))


def kill_all() -> None:
    """Kill every running cell's process group (Ctrl-C): nothing is left running behind the runner."""
    with _ACTIVE_LOCK:
        procs = list(_ACTIVE)
    for proc in procs:
        _kill_group(proc)
