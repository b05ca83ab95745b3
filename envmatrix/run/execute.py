"""Run the probe as a child process: its own process group, output to a log file, a hard timeout.

A cell's hang or crash ends there: the whole group (torchrun and every rank) is killed on timeout or
Ctrl-C, and the caller always gets an exit status back. Every process of a cell carries a tag in its
environment, so ranks that torchrun starts in sessions of their own are found too. A runner killed
with SIGKILL cannot clean up: its direct children get SIGKILL from the kernel (a parent-death
signal), and every running cell has an owner file naming its tag, so the next runner kills the rest.
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
import uuid
from dataclasses import dataclass
from pathlib import Path

from probes import source_files as probe_files

from ..spec.matrix import Scenario

#: The probe ships beside the package (a checkout) and inside the wheel (as `probes/`).
PROBE = Path(__file__).resolve().parents[2] / "probes" / "grpo_smoke.py"
GRACE_S = 5.0

_ACTIVE: dict[subprocess.Popen[bytes], str] = {}
_ACTIVE_LOCK = threading.Lock()
OWNER_FILE = ".envmatrix-owner.json"
TAG_VAR = "ENVMATRIX_CELL_TAG"
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """In the child before exec: SIGKILL when the runner thread that started it dies (Linux)."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass(frozen=True)
class Completed:
    """How a child process ended: exit status (negative: signal), whether we killed it, how long it ran."""

    exit_code: int
    timed_out: bool
    seconds: float
    launch: str = "process"  # how the cell was started: process, torchrun, forked, container, or why not forked


def probe_source() -> bytes:
    """Every file of the probe, in a stable order: what a cached record's inputs hash covers."""
    return b"".join(p.name.encode() + b"\0" + p.read_bytes() for p in probe_files())


def probe_command(python: str, scenario: Scenario, out_dir: Path, probe: Path = PROBE) -> list[str]:
    """The command that runs `scenario` under `python`, through torchrun when it needs several ranks."""
    launcher = [python]
    if scenario.world_size > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={scenario.world_size}"]
    return [*launcher, str(probe), *probe_argv(scenario, out_dir)]


def fork_refusal(scenario: Scenario) -> str | None:
    """Why a cell runs in a process of its own rather than forked by its environment's helper, or None. A
    forked cell inherits the helper's imports, and with them the hub folder they fixed (the environment's):
    remote code from a user's folder (--trust-remote-code) is copied there, so it runs where the cell's own
    hub folder is set before any import (probes/caches.py)."""
    if scenario.trust_remote_code:
        return "remote code runs in a process of its own, with its own hub folder"
    return None


def probe_argv(scenario: Scenario, out_dir: Path) -> list[str]:
    """The probe's own arguments for `scenario` (what a forked cell's `main(argv)` gets, on every rank)."""
    return ["--out", str(out_dir), *scenario.probe_args()]


def _kill_group(proc: subprocess.Popen[bytes], tag: str) -> None:
    """SIGTERM the whole group, then SIGKILL whatever is left after a grace period, and then every
    process carrying the cell's tag: torchrun starts its ranks in sessions of their own."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    kill_tagged(tag)


def run_logged(cmd: list[str], log_path: Path, *, timeout: float, env: dict[str, str] | None = None, owner: Path | None = None) -> Completed:
    """Run `cmd` with stdout+stderr into `log_path`; kill its process group at `timeout` seconds.
    Every process of the cell carries a tag in its environment; with `owner` (the cell's output
    folder) an owner file there names the runner and the tag while the cell runs."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    tag = uuid.uuid4().hex
    env = {**(os.environ if env is None else env), TAG_VAR: tag}
    owner_file = write_owner(owner, tag) if owner is not None else None
    with log_path.open("wb") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=die_with_parent
        )
        with _ACTIVE_LOCK:
            _ACTIVE[proc] = tag
        try:
            code = proc.wait(timeout=timeout)
            timed_out = False
            kill_tagged(tag)  # a rank that outlived its launcher
        except subprocess.TimeoutExpired:
            _kill_group(proc, tag)
            code, timed_out = proc.wait(), True
            log.write(f"\n[envmatrix] killed after the {timeout:g} s timeout\n".encode())
        except BaseException:
            _kill_group(proc, tag)
            raise
        finally:
            with _ACTIVE_LOCK:
                _ACTIVE.pop(proc, None)
            if owner_file is not None:
                owner_file.unlink(missing_ok=True)
    return Completed(code, timed_out, round(time.monotonic() - start, 3))


def write_owner(folder: Path, tag: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / OWNER_FILE
    path.write_text(json.dumps({"runner_pid": os.getpid(), "tag": tag}))
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


def tagged(tag: str) -> list[int]:
    """Live processes whose environment carries this cell tag (from /proc; none where there is none)."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


def kill_tagged(tag: str) -> list[int]:
    """SIGKILL every process of a cell, whatever session or group it moved to."""
    pids = [pid for pid in tagged(tag) if pid != os.getpid()]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    return pids


def reap_orphans(runs: Path) -> list[int]:
    """Kill what cells of a runner that died without cleaning up (kill -9) left running; return the
    pids. Only processes carrying a cell's tag, and only when that cell's runner is gone."""
    reaped: list[int] = []
    for owner in sorted(runs.glob(f"*/{OWNER_FILE}")):
        try:
            data = json.loads(owner.read_text())
            runner, tag = int(data["runner_pid"]), str(data["tag"])
        except (OSError, ValueError, KeyError, TypeError):
            owner.unlink(missing_ok=True)
            continue
        if runner != os.getpid() and process_alive(runner):
            continue  # another live runner's cell
        reaped += kill_tagged(tag)
        owner.unlink(missing_ok=True)
    return reaped


def kill_all() -> None:
    """Kill every running cell's process group (Ctrl-C): nothing is left running behind the runner."""
    with _ACTIVE_LOCK:
        procs = list(_ACTIVE.items())
    for proc, tag in procs:
        _kill_group(proc, tag)
