#!/usr/bin/env python3
"""A per-environment helper that pays the probe's imports once, then forks one child per cell.

    python probes/forkserver.py --socket PATH

Started with the environment's own interpreter (in a venv, or in the environment's container). It calls
`grpo_smoke.preload()` (torch, transformers and the model code, without initialising CUDA), checks that
forking is safe, then serves JSON lines on a unix socket, one request per connection:

    {"op": "hello"}  → {"ok": true, "fork": true|false, "reason": ..., "pid": ...}; this first
                       connection stays open as the lease: when it closes (the runner exited or was
                       killed), every child is killed and the helper exits.
    {"op": "run", "argv": [...], "argv0": PATH, "log": PATH, "env": {...}, "ranks": N}
                     → {"pid": N} at once, {"status": RAW_WAIT_STATUS} when the child ended. While it
                       runs the client may send {"op": "kill", "signal": N} (the child's whole process
                       group); a connection closed early kills the child's group. With "ranks" > 1 the
                       child forks that many ranks in its group and supervises them as torchrun would
                       (probes/ranks.py).

Each child is a real separate process: its own session and process group, stdout and stderr appended to
the cell's log, the cell's environment variables applied, `grpo_smoke.main(argv)`, then `os._exit`. It dies
with the helper (a parent-death signal), and the helper with the runner's process (one too). Standard
library only, besides the probe itself.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import importlib.util
import json
import os
import selectors
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # run as a script: make the `probes` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from probes import caches, grpo_smoke, ranks

_PR_SET_PDEATHSIG = 1
LEASE_WAIT_S = 600.0
#: What the probe's start() sets before its imports; a helper imports first, so it sets them first. And
#: PyTorch's NVML-based availability check: transformers (4.57 with flash-attn installed) calls
#: `torch.cuda.is_available()` at import, which otherwise initialises the CUDA driver (cuInit) while
#: `torch.cuda.is_initialized()` stays False, and a CUDA driver never survives fork (PyTorch's
#: torch.cuda docs; vLLM sets the same variable for the same reason).
PROBE_IMPORT_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    # numpy's and scipy's bundled OpenBLAS each start a pool of one thread per core when imported (scipy comes in through
    # scikit-learn, which transformers' generation imports where it is installed, as on most GPU hosts): on a 16-core
    # H100 host that was 15 threads more than torch's import leaves, so the helper would not fork and every cell ran in a
    # process of its own (about 20 s each). The probe does its math in torch, whose CPU kernels use their own threads.
    "OPENBLAS_NUM_THREADS": "1",
}
#: The CUDA driver API's CUDA_ERROR_NOT_INITIALIZED (cuda.h `CUresult`): what any call but cuInit answers
#: before cuInit ran in this process.
CUDA_ERROR_NOT_INITIALIZED = 3


def die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux; elsewhere the lease connection covers it)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: Native threads known to survive fork: their library stops them in the child by its own fork handlers.
FORK_SAFE_THREADS = {
    "jemalloc_bg_thd": "jemalloc (pyarrow's allocator, imported with datasets) disables its background threads in a forked child",
}


def native_threads() -> int:
    """Threads of this process as the kernel sees them (Python's and libraries' own), less those in
    FORK_SAFE_THREADS; -1 where unknown."""
    try:
        names = []
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
    except OSError:
        return -1
    return sum(1 for name in names if name not in FORK_SAFE_THREADS)


def fork_unsafe_reason(baseline_threads: int) -> str | None:
    """Why forking this process now would be unsafe, or None. A child gets a copy of one thread only: a
    lock another thread held stays locked forever. So: no Python threads besides this one, no native
    threads beyond the pool torch's import starts (OpenBLAS's, which re-initialises after fork), and
    CUDA not initialised (a CUDA context never survives fork)."""
    if not hasattr(os, "fork"):
        return f"this platform ({sys.platform}) has no fork"
    if threading.active_count() > 1:
        return f"{threading.active_count() - 1} Python thread(s) running besides the main one"
    now = native_threads()
    if now < 0:
        return "cannot count this process's threads (/proc/self/task unreadable)"
    if now > baseline_threads:
        return f"{now - baseline_threads} native thread(s) started during the imports (beyond torch's own import)"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "CUDA was initialised during the imports"
    driver = cuda_driver_state()
    if driver is not None:
        return f"the CUDA driver was initialised during the imports ({driver}), though torch's own flag says not"
    return None


def loaded_libcuda(maps: str | None = None) -> str | None:
    """The CUDA driver library this process has loaded (from /proc/self/maps), or None."""
    if maps is None:
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address perms offset dev inode [pathname]
        path = fields[5] if len(fields) == 6 else ""
        if Path(path).name.startswith("libcuda.so"):
            return path
    return None


def cuda_driver_state(maps: str | None = None) -> str | None:
    """Why this process's CUDA driver counts as initialised, or None when it is not. Not torch's flag (an
    `is_available()` initialises the driver and leaves it False) but the driver's own answer: where libcuda
    is loaded, cuDeviceGetCount answers CUDA_ERROR_NOT_INITIALIZED until cuInit ran; any other answer
    means it ran (or the state is unknown, which is unsafe to fork too). Never initialises anything."""
    path = loaded_libcuda(maps)
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        count = ctypes.c_int(0)
        code = int(lib.cuDeviceGetCount(ctypes.byref(count)))
    except (OSError, AttributeError) as exc:
        return f"{path} is loaded and cannot be asked: {exc}"
    if code == CUDA_ERROR_NOT_INITIALIZED:
        return None
    return f"{Path(path).name} answers cuDeviceGetCount with {code} ({count.value} devices)"


def set_cmdline(words: list[str]) -> None:
    """Make /proc/<pid>/cmdline (ps, pgrep, anyone looking for a cell by its folder) read as the cell's
    command, as far as the room the helper's own command line left allows (its --room argument)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start and arg_end (fields 48 and 49 of stat)
    except (OSError, IndexError, ValueError):
        return
    data = "\0".join(words).encode()[: max(0, end - start - 1)]
    room = data + b"\0" * (end - start - len(data))
    ctypes.memmove(start, room, len(room))


def preload() -> tuple[str | None, str | None]:
    """(error, unsafe reason): the imports once, and whether this process may fork afterwards. Where trl
    is installed its trainer is imported too; if that import fails, this process is left half-imported,
    so no cell is forked from it (each then meets the same failure in a process of its own)."""
    os.environ.update({k: v for k, v in PROBE_IMPORT_ENV.items() if k not in os.environ})
    try:
        import torch  # noqa: F401  (its import starts its BLAS pool: the baseline of native threads)

        baseline = native_threads()
        grpo_smoke.preload()
    except BaseException as exc:
        traceback.print_exc()
        return f"{type(exc).__name__}: {exc}"[:2000], None
    if importlib.util.find_spec("trl") is not None:
        try:
            from probes import trl_trainer

            trl_trainer.preload()
        except BaseException as exc:
            traceback.print_exc()
            return None, f"importing trl's trainer failed ({type(exc).__name__}: {str(exc)[:300]})"
    return None, fork_unsafe_reason(baseline)


def child(request: dict[str, Any], keep_open: list[int]) -> None:
    """In the forked child: become a cell process, run the probe, never return."""
    code = 1
    try:
        os.setsid()
        die_with_parent()
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for fd in keep_open:
            os.close(fd)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.update({str(k): str(v) for k, v in request.get("env", {}).items()})
        threads = os.environ.get("OMP_NUM_THREADS", "")
        torch = sys.modules.get("torch")
        if threads.isdigit() and int(threads) > 0 and torch is not None:  # the runner's share of the cores for this cell
            torch.set_num_threads(int(threads))
        argv = [str(a) for a in request["argv"]]
        set_cmdline([str(w) for w in request.get("cmdline", [])])
        sys.argv = [str(request.get("argv0", "grpo_smoke.py")), *argv]
        world = int(request.get("ranks", 1))
        code = ranks.launch(world, lambda: grpo_smoke.main(argv), die_with_parent) if world > 1 else grpo_smoke.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to say
                stream.flush()
        os._exit(code)


class Server:
    """The helper's loop: one thread, a selector over the listening socket, the connections and SIGCHLD."""

    def __init__(self, path: str, error: str | None, unsafe: str | None) -> None:
        self.error, self.unsafe = error, unsafe
        self.sel = selectors.DefaultSelector()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if os.path.exists(path):
            os.unlink(path)
        self.listener.bind(path)
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.sel.register(self.listener, selectors.EVENT_READ, "accept")
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        self.sel.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.keep = [self.listener.fileno(), self.wake_r, wake_w]
        self.buffers: dict[socket.socket, bytes] = {}
        self.children: dict[int, socket.socket] = {}  # pid → its client's connection
        self.lease: socket.socket | None = None
        self.started = time.monotonic()

    def serve(self) -> None:
        while True:
            if self.lease is None and time.monotonic() - self.started > LEASE_WAIT_S:
                return  # nobody ever came for this helper
            for key, _ in self.sel.select(timeout=1.0):
                if key.data == "accept":
                    self.accept()
                elif key.data == "wake":
                    self.drain_wakeups()
                elif not self.readable(key.fileobj):  # type: ignore[arg-type]
                    return  # the lease ended: the runner is gone
            self.reap()

    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(True)
        self.buffers[conn] = b""
        self.sel.register(conn, selectors.EVENT_READ, "conn")

    def drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def readable(self, conn: socket.socket) -> bool:
        """Handle data or EOF on a connection; False when the lease connection ended."""
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data:
            return self.closed(conn)
        self.buffers[conn] += data
        while b"\n" in self.buffers[conn]:
            line, self.buffers[conn] = self.buffers[conn].split(b"\n", 1)
            try:
                self.handle(conn, json.loads(line))
            except (ValueError, KeyError, TypeError) as exc:
                self.send(conn, {"error": f"bad request: {exc}"})
        return True

    def closed(self, conn: socket.socket) -> bool:
        self.forget(conn)
        for pid, owner in list(self.children.items()):
            if owner is conn:  # its client is gone: so is the cell
                self.kill(pid, signal.SIGKILL)
        return conn is not self.lease

    def forget(self, conn: socket.socket) -> None:
        if conn in self.buffers:
            self.sel.unregister(conn)
            del self.buffers[conn]
            conn.close()

    def handle(self, conn: socket.socket, req: dict[str, Any]) -> None:
        op = req["op"]
        if op == "hello":
            self.lease = conn
            self.send(conn, {"ok": self.error is None, "error": self.error, "fork": self.unsafe is None, "reason": self.unsafe, "pid": os.getpid()})
        elif op == "run":
            if self.error is not None or self.unsafe is not None:
                self.send(conn, {"error": self.error or self.unsafe})
                return
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            pid = os.fork()
            if pid == 0:
                child(req, [*self.keep, *(c.fileno() for c in self.buffers)])
            self.children[pid] = conn
            self.send(conn, {"pid": pid})
        elif op == "kill":
            for pid, owner in self.children.items():
                if owner is conn:
                    self.kill(pid, int(req.get("signal", signal.SIGKILL)))
        else:
            self.send(conn, {"error": f"unknown op {op!r}"})

    def send(self, conn: socket.socket, message: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):  # the client went away; its EOF arrives through the selector
            conn.sendall(json.dumps(message).encode() + b"\n")

    @staticmethod
    def kill(pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def reap(self) -> None:
        """Report every ended child; first kill what is left of its process group (before its pid is free)."""
        while self.children:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            self.kill(info.si_pid, signal.SIGKILL)
            _, status = os.waitpid(info.si_pid, 0)
            conn = self.children.pop(info.si_pid, None)
            if conn is not None:
                self.send(conn, {"status": status})
                self.forget(conn)

    def shutdown(self) -> None:
        for pid in list(self.children):
            self.kill(pid, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="forkserver.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--socket", required=True, help="the unix socket to serve on (created once the imports are done)")
    parser.add_argument("--room", default="", help="blank room on the command line: each child's command line is rewritten to its cell's")
    parser.add_argument("--caches", help="the environment's cache root where the caller set none (default: beside the socket)")
    args = parser.parse_args(argv)
    die_with_parent()
    caches.apply(caches.variables(args.caches or Path(args.socket).parent / "caches"))  # before preload() imports anything
    error, unsafe = preload()
    server = Server(args.socket, error, unsafe)
    print(f"forkserver {os.getpid()}: {'ready' if error is None else 'imports failed'}; fork {'unsafe: ' + unsafe if unsafe else 'safe'}", flush=True)
    try:
        server.serve()
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
