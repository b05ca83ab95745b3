"""A GPU is used by one cell at a time on a host, whichever runner runs it.

A runner hands each cell GPUs of its own (run/runner.py GpuPool), but two runners on one host that were not each
given their GPUs (CUDA_VISIBLE_DEVICES, a scheduler's allocation) both see every GPU and would run cells on the
same one at once: out-of-memory errors and timings that are the other runner's. Each cell holds an flock per GPU
in a folder every runner of the host uses, named by the GPU's UUID (a Slurm job confined to its GPUs sees them
numbered from 0: an index would make two jobs on one node wait on each other), by nvidia-smi index where there is
no UUID; locks are taken in one order, so two multi-GPU cells cannot wait on each other; the kernel drops them when
a runner dies.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from .gpus import detect_gpus

#: Fixed, not under TMPDIR: a scheduler gives each job its own TMPDIR, and the runners of one host must meet here.
LOCK_DIR = Path("/tmp/envmatrix-gpu-locks")
POLL_S = 0.2


@functools.cache
def _uuids() -> dict[int, str]:
    """nvidia-smi index → UUID of this host's GPUs (asked once); empty without nvidia-smi."""
    return {g.index: g.uuid for g in detect_gpus().devices if g.uuid and re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z-]{1,80}", g.uuid)}


def lock_names(gpu_ids: list[int]) -> list[str]:
    """The lock file of each GPU, in the one order every runner takes them in."""
    uuids = _uuids()
    return sorted(f"{uuids[i]}.lock" if i in uuids else f"gpu{i}.lock" for i in gpu_ids)


def _open(path: Path) -> int | None:
    """A descriptor to lock (read-only: another user's lock file can be locked too), None where the folder cannot
    be made or read (the runner then goes without: it still never shares a GPU with its own cells)."""
    try:
        path.parent.mkdir(mode=0o1777, parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):
            path.parent.chmod(0o1777)
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
    except OSError:
        return None
    return fd


@contextlib.contextmanager
def held(gpu_ids: list[int], stop: threading.Event | None = None, folder: Path = LOCK_DIR) -> Iterator[bool]:
    """Hold every GPU of `gpu_ids` for the block, waiting while another runner's cell has one; yields False when
    `stop` was set while waiting (the caller runs nothing)."""
    with contextlib.ExitStack() as stack:
        for name in lock_names(gpu_ids):
            fd = _open(folder / name)
            if fd is None:
                continue
            stack.callback(os.close, fd)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES):
                        break  # a file system without flock: go without
                if stop is not None and stop.wait(POLL_S):
                    yield False
                    return
                if stop is None:
                    time.sleep(POLL_S)
        yield True
