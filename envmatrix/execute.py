"""Run the probe as a child process: its own process group, output to a log file, a hard timeout.

A cell's hang or crash ends there: the whole group (torchrun and every rank) is killed on timeout or
Ctrl-C, and the caller always gets an exit status back. A runner killed with SIGKILL cannot clean up:
its direct children get SIGKILL from the kernel (a parent-death signal), and every cell leaves an
owner file naming its process group, so the next runner kills what is left (torchrun's ranks).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
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
OWNER_FILE = ".envmatrix-owner.json"
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the runner thread that started it dies (Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class Completed:
    """How a child process ended: exit status (negative: signal), whether we killed it, how long it ran."""

    exit_code: int
    timed_out: bool
    seconds: float


def probe_source() -> bytes:
    """Every file of the probe, in a stable order: what a cached record's inputs hash covers."""
    return b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in sorted(PROBE.parent.glob("*.py")))


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


def run_logged(cmd: list[str], log_path: Path, *, timeout: float, env: dict[str, str] | None = None, owner: Path | None = None) -> Completed:
    """Run `cmd` with stdout+stderr into `log_path`; kill its process group at `timeout` seconds.
    With `owner` (the cell's output folder) the group is named in an owner file there while it runs."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=_die_with_parent
        )
        with _ACTIVE_LOCK:
            _ACTIVE.add(proc)
        owner_file = _write_owner(owner, proc.pid) if owner is not None else None
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
            if owner_file is not None:
                owner_file.unlink(missing_ok=True)
    return Completed(code, timed_out, round(time.monotonic() - start, 3))


def _write_owner(folder: Path, pgid: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / OWNER_FILE
    path.write_text(json.dumps({"runner_pid": os.getpid(), "pgid": pgid}))
    return path


def process_alive(pid: int) -> bool:
    """Whether a process exists (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_members(pgid: int) -> list[int]:
    """Processes whose process group is `pgid` (from /proc; empty where there is no /proc)."""
    members = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def reap_orphans(runs: Path) -> list[int]:
    """Kill the process groups of cells whose runner died without cleaning up (kill -9); return them.
    A group is killed only when its owner file says so, its runner is gone, and it still exists."""
    reaped = []
    for owner in sorted(runs.glob(f"*/{OWNER_FILE}")):
        try:
            data = json.loads(owner.read_text())
            runner, pgid = int(data["runner_pid"]), int(data["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            owner.unlink(missing_ok=True)
            continue
        if runner != os.getpid() and process_alive(runner):
            continue  # another live runner's cell
        if pgid > 1 and _group_members(pgid):
            try:
                os.killpg(pgid, signal.SIGKILL)
                reaped.append(pgid)
            except (ProcessLookupError, PermissionError):
                pass
        owner.unlink(missing_ok=True)
    return reaped


def kill_all() -> None:
    """Kill every running cell's process group (Ctrl-C): nothing is left running behind the runner."""
    with _ACTIVE_LOCK:
        procs = list(_ACTIVE)
    for proc in procs:
        _kill_group(proc)
