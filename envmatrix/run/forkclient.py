"""The runner's side of the per-environment fork helper (probes/forkserver.py): start it, ask it to fork
a cell, enforce the cell's timeout from outside, and notice when the helper itself dies or hangs.

The helper pays torch's and transformers' imports once per environment; each cell is a forked child in
its own process group, with the same command line contract, output folder, log and exit status as a
cell run by `execute.run_logged`. Whatever goes wrong with the helper costs no record: the caller runs
that cell again in a process of its own (and says so in the cell's log).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host import memory
from .execute import GRACE_S, PROBE, TAG_VAR, Completed, die_with_parent, kill_tagged, write_owner

FORKSERVER = Path(__file__).resolve().parents[2] / "probes" / "forkserver.py"
START_TIMEOUT_S = 900.0  # the helper's imports; on a loaded machine torch + transformers take half a minute
REPLY_S = 30.0  # a fork must be answered within this, or the helper counts as hung
HARD_S = 30.0  # after the last kill, the status must arrive within this, or the helper counts as hung
MAX_FAILURES = 3  # helpers of one environment that died or hung before it runs one process per cell
CMDLINE_ROOM = 4096  # bytes of the helper's command line its children rewrite into their cells' commands
LOG_NOTE = "[envmatrix] fork helper not used for this cell: {reason}; it ran in a process of its own"
#: Idle helpers (each holds an environment's torch and transformers, a few hundred MB to GBs) are stopped, least
#: recently used first, while what this runner may still allocate (host/memory.py: MemAvailable, or its cgroup's
#: room) is below this: the cells being run need the memory more than a later cell needs a warm helper.
MIN_AVAILABLE_BYTES = 4 * 1024**3
IDLE_S = 5.0  # a helper handed out this recently is about to fork its cell: never evicted


class HelperFailed(Exception):
    """The helper could not start, died, or stopped answering: the cell runs in its own process instead."""


@dataclass
class Helper:
    """A running helper: its socket, its lease (the connection whose end stops it), and how to stop it."""

    socket_path: Path
    lease: socket.socket
    pid: int
    fork: bool
    reason: str | None
    stop: Callable[[], None]
    alive: Callable[[], bool]
    shares_pids: bool  # the runner sees the helper's pids (a venv) or not (a container)
    tag: str | None = None
    busy: set[int] = field(default_factory=set)
    closed: bool = False

    def close(self) -> None:
        """Stop the helper (and so every cell it forked); once."""
        if self.closed:
            return
        self.closed = True
        try:
            self.lease.close()
        finally:
            self.stop()


class _Lines:
    """JSON lines over a stream socket, read with deadlines."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def read(self, deadline: float) -> dict[str, Any] | None:
        """The next message; None at the deadline; HelperFailed when the helper closed the connection."""
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            except OSError as exc:
                raise HelperFailed(f"connection to the helper failed: {exc}") from None
            if not chunk:
                raise HelperFailed("the helper closed the connection (it died)")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        message = json.loads(line)
        if not isinstance(message, dict):
            raise HelperFailed(f"the helper answered {line[:200]!r}")
        return message


def connect_when_ready(
    path: Path, alive: Callable[[], bool], why_dead: Callable[[], str], timeout: float = START_TIMEOUT_S
) -> tuple[socket.socket, dict[str, Any]]:
    """Wait for the helper's socket (it appears once the imports are done), say hello, keep that
    connection as the lease. HelperFailed when the helper died or never came up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(path))
                lines = _Lines(sock)
                lines.send({"op": "hello"})
                hello = lines.read(time.monotonic() + REPLY_S)
            except (OSError, HelperFailed):
                sock.close()
                hello = None
            if hello is not None:
                return sock, hello
        if not alive():
            raise HelperFailed(f"the helper exited before it was ready: {why_dead()}")
        time.sleep(0.1)
    raise HelperFailed(f"the helper was not ready after {timeout:g} s")


def helper_from_hello(path: Path, sock: socket.socket, hello: dict[str, Any], **how: Any) -> Helper:
    """A Helper from its hello; HelperFailed (with the import error) when its imports failed."""
    if not hello.get("ok"):
        sock.close()
        how["stop"]()
        raise HelperFailed(f"the helper's imports failed: {hello.get('error')}")
    return Helper(socket_path=path, lease=sock, pid=int(hello.get("pid", 0)), fork=bool(hello.get("fork")), reason=hello.get("reason"), **how)


@dataclass(frozen=True)
class Ended:
    """How a forked cell ended: its raw wait status (None when it is unknown: the helper hung), whether
    its timeout killed it, and its wall seconds."""

    status: int | None
    timed_out: bool
    seconds: float


def run_forked(
    helper: Helper,
    request: dict[str, Any],
    *,
    timeout: float,
    kills: tuple[tuple[int, float], ...],
    on_pid: Callable[[int], None] = lambda pid: None,
) -> Ended:
    """Ask the helper to fork one cell and wait for its status; at `timeout` send `kills` (signal, seconds
    to wait) to its process group, through the helper and, where the pids are ours, directly too. A helper
    that dies before the cell ends raises HelperFailed; one that never reports after the last kill is
    stopped and the status is unknown."""
    start = time.monotonic()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            sock.connect(str(helper.socket_path))
        except OSError as exc:
            raise HelperFailed(f"cannot reach the helper: {exc}") from None
        lines = _Lines(sock)
        lines.send({"op": "run", **request})
        reply = lines.read(time.monotonic() + REPLY_S)
        if reply is None or "pid" not in reply:
            raise HelperFailed(f"the helper did not fork the cell: {reply or f'no answer in {REPLY_S:g} s'}")
        pid = int(reply["pid"])
        helper.busy.add(pid)
        on_pid(pid)
        try:
            got = lines.read(start + timeout)
            if got is not None:
                return Ended(int(got["status"]), False, round(time.monotonic() - start, 3))
            try:
                for sig, wait in kills:
                    lines.send({"op": "kill", "signal": int(sig)})
                    if helper.shares_pids:
                        _killpg(pid, sig)
                    got = lines.read(time.monotonic() + wait)
                    if got is not None:
                        return Ended(int(got["status"]), True, round(time.monotonic() - start, 3))
            except (OSError, HelperFailed):
                pass  # the helper died while its cell was being killed: the cell timed out all the same
            helper.close()  # it never reported the killed child: dead or hung
            if helper.shares_pids:
                _killpg(pid, signal.SIGKILL)
            return Ended(None, True, round(time.monotonic() - start, 3))
        finally:
            helper.busy.discard(pid)
    except OSError as exc:
        raise HelperFailed(f"connection to the helper failed: {exc}") from None
    finally:
        sock.close()


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


# ---- helpers as child processes (venv and host backends) --------------------------------------------


def start_process_helper(python: str, env: dict[str, str] | None) -> Helper:
    """Start probes/forkserver.py with `python` in its own session; it dies with the runner (parent-death
    signal, and its lease), and every process it forks carries its tag (for orphan reaping)."""
    folder = Path(tempfile.mkdtemp(prefix="envmatrix-fork-"))
    path, log = folder / "helper.sock", folder / "helper.log"
    tag = uuid.uuid4().hex
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [python, str(FORKSERVER), "--socket", str(path), "--room", " " * CMDLINE_ROOM],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**(os.environ if env is None else env), TAG_VAR: tag},
            start_new_session=True,
            preexec_fn=die_with_parent,
        )

    def stop() -> None:
        _killpg(proc.pid, signal.SIGKILL)
        kill_tagged(tag)  # its children left its group (each has its own)
        proc.wait()
        shutil.rmtree(folder, ignore_errors=True)

    def why_dead() -> str:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        return f"exit {proc.returncode}: " + " | ".join(tail)

    try:
        sock, hello = connect_when_ready(path, lambda: proc.poll() is None, why_dead)
    except HelperFailed:
        stop()
        raise
    return helper_from_hello(path, sock, hello, stop=stop, alive=lambda: proc.poll() is None, shares_pids=True, tag=tag)


class HelperPool:
    """One helper per environment, started on first use and restarted when it died; a cell that gets a
    reason instead of a helper runs in a process of its own."""

    def __init__(self, min_available: int = MIN_AVAILABLE_BYTES, read_available: Callable[[], int | None] = memory.available) -> None:
        self.lock = threading.Lock()
        self.helpers: dict[str, Helper] = {}
        self.failures: dict[str, list[str]] = {}
        self.key_locks: dict[str, threading.Lock] = {}
        self.stopped = False
        self.min_available = min_available
        self.read_available = read_available
        self.last_used: dict[str, float] = {}
        self.evicted: list[str] = []

    def evict_idle(self, keep: str | None = None) -> list[str]:
        """Stop idle helpers (no cell running, none handed out in the last IDLE_S), least recently used first, while
        the memory left is below `min_available`; never `keep` (the one being asked for). Their keys, in order."""
        evicted: list[str] = []
        while True:
            room = self.read_available()
            if room is None or room >= self.min_available:
                break
            with self.lock:
                now = time.monotonic()
                used = {k: self.last_used.get(k, 0.0) for k in self.helpers}
                idle = [(used[k], k) for k, h in self.helpers.items() if k != keep and not h.busy and now - used[k] >= IDLE_S]
                if not idle:
                    break
                _, key = min(idle)
                helper = self.helpers.pop(key)
            helper.close()  # not a failure: the next cell of that environment starts a new one
            evicted.append(key)
        with self.lock:
            self.evicted.extend(evicted)
        return evicted

    def helper(self, key: str, start: Callable[[], Helper]) -> Helper | str:
        """The live helper for `key` (started with `start` when there is none), or why there is none. Idle helpers of
        other environments are evicted first where memory is short."""
        self.evict_idle(keep=key)
        with self.lock:
            key_lock = self.key_locks.setdefault(key, threading.Lock())
            self.last_used[key] = time.monotonic()
        with key_lock:
            helper = self.helpers.get(key)
            if helper is not None and not helper.closed and helper.alive():
                return helper if helper.fork else f"forking is unsafe in this environment ({helper.reason})"
            if helper is not None:
                self.failed(key, helper, f"helper {helper.pid} died")
            failures = self.failures.get(key, [])
            if self.stopped:
                return "the run is stopping"
            if len(failures) >= MAX_FAILURES:
                return f"its helper failed {len(failures)} times (last: {failures[-1]})"
            try:
                helper = start()
            except HelperFailed as exc:
                self.failures.setdefault(key, []).extend([str(exc)] * MAX_FAILURES)  # an import error does not heal
                return str(exc)
            with self.lock:
                if self.stopped:
                    helper.close()
                    return "the run is stopping"
                self.helpers[key] = helper
                self.last_used[key] = time.monotonic()  # its start took a while: it is about to serve its cell
            return helper if helper.fork else f"forking is unsafe in this environment ({helper.reason})"

    def failed(self, key: str, helper: Helper, why: str) -> None:
        """A helper died or hung (while serving a cell, or between cells): stop it; the next cell starts another."""
        with self.lock:
            if self.helpers.get(key) is helper:
                del self.helpers[key]
            self.failures.setdefault(key, []).append(why)
        helper.close()

    def stop_all(self) -> None:
        """Kill every helper and every cell it forked (Ctrl-C, the end of the run)."""
        with self.lock:
            self.stopped = True
            helpers, self.helpers = list(self.helpers.values()), {}
        for helper in helpers:
            helper.close()

    def reopen(self) -> None:
        """Accept new helpers again (a backend entered for another run)."""
        with self.lock:
            self.stopped = False
            self.failures.clear()


def run_in_process_helper(
    pool: HelperPool,
    python: str,
    env: dict[str, str] | None,
    argv: list[str],
    log: Path,
    *,
    ranks: int,
    timeout: float,
    overrides: dict[str, str],
    owner: Path,
) -> Completed | str:
    """One cell (the probe with `argv`, on `ranks` ranks) forked by the helper of `python`'s environment:
    the same log (first line `$ <command>`) and Completed as `run_logged`; or why not (the caller runs the
    cell itself)."""
    key = hashlib.sha256(json.dumps([python, sorted((env or {}).items())]).encode()).hexdigest()[:16]
    helper = pool.helper(key, lambda: start_process_helper(python, env))
    if isinstance(helper, str):
        return helper
    cmd = [python, str(PROBE), *argv]
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(("$ " + " ".join(cmd) + "\n").encode())
    tag = uuid.uuid4().hex
    owner_file = write_owner(owner, helper.tag or tag)  # a runner killed with -9: the next one reaps the helper's tag
    request = {"argv": argv, "argv0": str(PROBE), "cmdline": cmd, "log": str(log.resolve()), "env": {**overrides, TAG_VAR: tag}, "ranks": ranks}
    try:
        ended = run_forked(helper, request, timeout=timeout, kills=((signal.SIGTERM, GRACE_S), (signal.SIGKILL, HARD_S)))
    except HelperFailed as exc:
        if pool.stopped:  # Ctrl-C stopped the helper under this cell: the runner drops it, nothing reruns
            return Completed(-signal.SIGKILL, False, 0.0)
        pool.failed(key, helper, str(exc))
        return f"{exc} while serving this cell"
    finally:
        owner_file.unlink(missing_ok=True)
    kill_tagged(tag)  # whatever the cell started in sessions of its own
    if ended.status is None:
        pool.failed(key, helper, "it did not report a killed cell")
    if ended.timed_out:
        with log.open("ab") as fh:
            fh.write(f"\n[envmatrix] killed after the {timeout:g} s timeout\n".encode())
    code = -signal.SIGKILL if ended.status is None else os.waitstatus_to_exitcode(ended.status)
    return Completed(code, ended.timed_out, ended.seconds, launch=forked_launch(ranks))


def forked_launch(ranks: int, where: str = "") -> str:
    """The record's `launch` for a forked cell: "forked", "2 ranks forked", with where (the container)."""
    return (f"{ranks} ranks forked" if ranks > 1 else "forked") + where
