"""Run the real `envmatrix` command in a child process under a memory limit and a time limit, and
measure what it used: exit status, output, wall time and peak resident memory (from wait4)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
TIME_LIMIT_S = 30.0  # a hang guard: every case here ends in about a second
ADDRESS_LIMIT = 1 << 30  # RLIMIT_AS of the child: a runaway allocation dies at 1 GiB, not the machine
PEAK_RSS_LIMIT_KIB = 256 * 1024  # what a case may really use (the command needs about 30 MiB)


@dataclass
class Ended:
    """How a bounded child ended."""

    status: int
    stdout: str
    stderr: str
    seconds: float
    peak_rss_kib: int
    killed_for_time: bool


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))


Stream = int | IO[bytes] | None


def _hwm_kib(pid: int) -> int:
    """The process's own peak RSS since its exec (VmHWM). Not rusage's ru_maxrss: that counts the
    pages the child shared with this (large) test process between fork and exec."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run_bounded(args: list[str], *, stdin: Stream = subprocess.DEVNULL, stdout: Stream = None, cwd: Path | None = None) -> Ended:
    """`python -m envmatrix ARGS` (or `python ARGS` when args[0] is `-c`), bounded and measured."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    cmd = [sys.executable, *args] if args and args[0] == "-c" else [sys.executable, "-m", "envmatrix", *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=out if stdout is None else stdout, stderr=err, env=env, cwd=cwd or ROOT, preexec_fn=_limit)
        killed = False
        peak = 0
        while True:
            peak = max(peak, _hwm_kib(proc.pid))
            pid, status, _usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > TIME_LIMIT_S:
                os.kill(proc.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return Ended(proc.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"), seconds, peak, killed)


def assert_clean_failure(ended: Ended, status: int = 2, *, says: str = "") -> None:
    """Ended in time and memory with the given status, a message, and no traceback."""
    assert not ended.killed_for_time, f"still running after {TIME_LIMIT_S} s"
    assert ended.peak_rss_kib <= PEAK_RSS_LIMIT_KIB, f"peak RSS {ended.peak_rss_kib} KiB"
    assert "Traceback" not in ended.stderr, ended.stderr
    assert ended.status == status, (ended.status, ended.stderr[-2000:])
    if status:
        assert ended.stderr.startswith("envmatrix: error: ") or "usage:" in ended.stderr, ended.stderr
    assert says in ended.stderr, ended.stderr
