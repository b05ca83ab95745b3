"""The fork helper's pieces without torch: its safety check, its protocol with a real forked child
(the probe's option parsing only), the client's timeout and hung-helper handling, and the pool's restarts."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envmatrix.run.forkclient import Helper, HelperFailed, HelperPool, connect_when_ready, helper_from_hello, run_forked
from probes.forkserver import fork_unsafe_reason, native_threads

ROOT = Path(__file__).resolve().parents[3]


def test_forking_is_safe_in_a_plain_process_and_unsafe_with_a_thread() -> None:
    assert fork_unsafe_reason(native_threads()) is None
    before = native_threads()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        assert "Python thread" in (fork_unsafe_reason(native_threads()) or "")
    finally:
        stop.set()
        worker.join()
    deadline = time.monotonic() + 10
    while native_threads() > before and time.monotonic() < deadline:  # a joined thread leaves /proc/self/task a moment later
        time.sleep(0.01)
    assert "native thread" in (fork_unsafe_reason(native_threads() - 1) or "")


def test_threads_whose_library_survives_fork_are_not_counted() -> None:
    """jemalloc's background thread (pyarrow's, imported with datasets and trl) does not make forking unsafe."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    before = native_threads()
    stop, named = threading.Event(), threading.Event()

    def run(name: bytes) -> None:
        libc.prctl(15, name)  # PR_SET_NAME: what /proc/self/task/<tid>/comm shows
        named.set()
        stop.wait()

    for name, counted in ((b"jemalloc_bg_thd", 0), (b"other_pool", 1)):
        stop.clear()
        named.clear()
        worker = threading.Thread(target=run, args=(name,))
        worker.start()
        named.wait()
        try:
            assert native_threads() == before + counted, name
        finally:
            stop.set()
            worker.join()
        deadline = time.monotonic() + 10
        while native_threads() > before and time.monotonic() < deadline:
            time.sleep(0.01)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Helper]:
    """A real forkserver loop (imports skipped) in a subprocess: children run the probe's main()."""
    path = tmp_path / "s.sock"
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from probes.forkserver import Server; Server({str(path)!r}, None, None).serve()"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    def stop() -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    sock, hello = connect_when_ready(path, lambda: proc.poll() is None, lambda: "exited", timeout=60)
    helper = helper_from_hello(path, sock, hello, stop=stop, alive=lambda: proc.poll() is None, shares_pids=True)
    yield helper
    helper.close()


def test_a_forked_child_runs_the_probe_main_with_its_own_log_and_status(server: Helper, tmp_path: Path) -> None:
    assert server.fork and server.pid > 0
    log = tmp_path / "help.log"
    ended = run_forked(server, {"argv": ["--help"], "log": str(log)}, timeout=60, kills=())
    assert ended.status is not None and os.waitstatus_to_exitcode(ended.status) == 0 and not ended.timed_out
    assert "usage: grpo_smoke.py" in log.read_text()
    bad = run_forked(server, {"argv": ["--no-such-option"], "log": str(tmp_path / "bad.log")}, timeout=60, kills=())
    assert bad.status is not None and os.waitstatus_to_exitcode(bad.status) == 2  # the probe's bad-options status
    assert "error: the following arguments are required: --out" in (tmp_path / "bad.log").read_text()
    assert server.alive()  # and it keeps serving


class FakeHelper:
    """A socket that answers a run with a pid, then behaves as told: report on kill, ignore it, or die."""

    def __init__(self, tmp: Path, behaviour: str) -> None:
        self.path = tmp / "fake.sock"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(4)
        self.behaviour = behaviour
        self.kills: list[int] = []
        self.stopped = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        reader = conn.makefile("rb")
        json.loads(reader.readline())
        conn.sendall(b'{"pid": 999999999}\n')
        if self.behaviour == "die":
            conn.close()
            return
        for line in reader:
            self.kills.append(json.loads(line)["signal"])
            if self.behaviour == "report" and self.kills[-1] == signal.SIGKILL:
                conn.sendall(json.dumps({"status": signal.SIGKILL}).encode() + b"\n")  # raw status: killed by 9

    def helper(self) -> Helper:
        def stop() -> None:
            self.stopped = True

        return Helper(self.path, socket.socket(), 1, True, None, stop, lambda: not self.stopped, shares_pids=False)


def test_timeout_sends_the_kills_and_reports_the_status(tmp_path: Path) -> None:
    fake = FakeHelper(tmp_path, "report")
    ended = run_forked(fake.helper(), {"argv": []}, timeout=0.5, kills=((signal.SIGTERM, 0.3), (signal.SIGKILL, 5)))
    assert ended.timed_out and ended.status is not None and os.WTERMSIG(ended.status) == signal.SIGKILL
    assert fake.kills == [signal.SIGTERM, signal.SIGKILL] and not fake.stopped


def test_a_helper_that_ignores_the_kill_is_stopped_as_hung(tmp_path: Path) -> None:
    fake = FakeHelper(tmp_path, "ignore")
    start = time.monotonic()
    ended = run_forked(fake.helper(), {"argv": []}, timeout=0.3, kills=((signal.SIGKILL, 0.5),))
    assert ended.timed_out and ended.status is None and fake.stopped
    assert time.monotonic() - start < 5


def test_a_helper_that_dies_mid_cell_raises(tmp_path: Path) -> None:
    fake = FakeHelper(tmp_path, "die")
    with pytest.raises(HelperFailed, match="died"):
        run_forked(fake.helper(), {"argv": []}, timeout=10, kills=())


def fake(pid: int, fork: bool = True, reason: str | None = None) -> Helper:
    state = {"alive": True}

    def stop() -> None:
        state["alive"] = False

    return Helper(Path("/nowhere"), socket.socket(), pid, fork, reason, stop, lambda: state["alive"], shares_pids=True)


def test_pool_restarts_a_dead_helper_and_gives_up_on_import_errors() -> None:
    pool = HelperPool()
    started: list[Helper] = []

    def start() -> Helper:
        started.append(fake(len(started) + 1))
        return started[-1]

    first = pool.helper("env", start)
    assert pool.helper("env", start) is first and len(started) == 1
    first.stop()  # it died
    second = pool.helper("env", start)
    assert isinstance(second, Helper) and second is not first and len(started) == 2

    def broken() -> Helper:
        raise HelperFailed("the helper's imports failed: ModuleNotFoundError: No module named 'torch'")

    assert "No module named 'torch'" in str(pool.helper("other", broken))
    assert "failed" in str(pool.helper("other", start)) and len(started) == 2  # an import error does not heal
    assert "unsafe" in str(pool.helper("threads", lambda: fake(9, fork=False, reason="2 Python thread(s)")))
    pool.stop_all()
    assert not second.alive() and pool.helper("env", start) == "the run is stopping"


def real_helper(tmp_path: Path, name: str) -> Helper:
    """A real forkserver process (its torch imports skipped), as start_process_helper starts one."""
    path = tmp_path / f"{name}.sock"
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from probes.forkserver import Server; Server({str(path)!r}, None, None).serve()"
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)

    def stop() -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    sock, hello = connect_when_ready(path, lambda: proc.poll() is None, lambda: "exited", timeout=60)
    return helper_from_hello(path, sock, hello, stop=stop, alive=lambda: proc.poll() is None, shares_pids=True)


def test_idle_helpers_are_evicted_least_recently_used_first_when_memory_is_short(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real helper processes; the memory reading is the host's real one until the simulated shortage: a threshold
    above what this machine has, for exactly one reading (one eviction frees enough)."""
    from envmatrix.host import memory
    from envmatrix.run import forkclient

    monkeypatch.setattr(forkclient, "IDLE_S", 0.0)
    real = memory.available()
    assert real is not None and real > 0
    pool = HelperPool(min_available=1)  # never short: nothing is evicted
    helpers = {name: pool.helper(name, lambda name=name: real_helper(tmp_path, name)) for name in ("a", "b", "c")}
    assert all(isinstance(h, Helper) and h.alive() for h in helpers.values()) and pool.evicted == []

    pool.helper("a", lambda: pytest.fail("a is alive: reused, not started"))  # a is now the most recently used: b is the least
    busy = helpers["c"]
    assert isinstance(busy, Helper)
    short = iter([0, real])  # one reading below the threshold, then enough room
    pool.read_available = lambda: next(short, real)
    pool.min_available = real // 2
    pool.helper("d", lambda: real_helper(tmp_path, "d"))
    b = helpers["b"]
    assert isinstance(b, Helper)
    assert pool.evicted == ["b"] and not b.alive() and b.closed  # its process is gone
    assert all(h.alive() for k, h in helpers.items() if k != "b" and isinstance(h, Helper))

    busy.busy.add(12345)  # c is serving a cell: never evicted, however short memory is
    pool.read_available = lambda: 0
    pool.helper("d", lambda: pytest.fail("d is alive"))
    assert pool.evicted == ["b", "a"] and busy.alive() and "c" in pool.helpers and "d" in pool.helpers
    assert pool.failures == {}  # an eviction is no failure: the next cell of "a" starts a new helper
    busy.busy.clear()
    pool.stop_all()


def test_memory_left_reads_meminfo_and_a_cgroup_limit(tmp_path: Path) -> None:
    from envmatrix.host import memory

    assert memory.meminfo_available("MemTotal: 100 kB\nMemAvailable:   2048 kB\n") == 2048 * 1024
    v2 = tmp_path / "job"
    v2.mkdir()
    (v2 / "memory.max").write_text("1073741824\n")
    (v2 / "memory.current").write_text("268435456\n")
    assert memory.cgroup_room("0::/job\n", tmp_path) == 805306368
    (v2 / "memory.max").write_text("max\n")
    assert memory.cgroup_room("0::/job\n", tmp_path) is None  # no limit
    v1 = tmp_path / "memory" / "slurm"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("2147483648\n")
    (v1 / "memory.usage_in_bytes").write_text("2147483648\n")
    assert memory.cgroup_room("4:memory:/slurm\n0::/\n", tmp_path) == 0
