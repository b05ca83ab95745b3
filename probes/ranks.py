"""The ranks of a multi-rank (DDP) cell forked by the environment's helper, in place of torchrun.

torchrun (`torch.distributed.run --standalone`) starts a fresh interpreter per rank, and each pays torch's
and transformers' imports again; the helper already holds them. A forked rank sees what a torchrun worker
sees: torchrun's variables (`rank_env`), one CPU thread unless OMP_NUM_THREADS is set (torchrun's default
with several ranks on a node), unbuffered output, every rank's output in the cell's log. The launcher does
torchrun's job: when a rank fails, the others get SIGTERM and, DEATH_TIMEOUT_S later, SIGKILL; the cell
exits 1 when any rank failed, with a summary in torchrun's words (`exitcode  : -8`, `Signal 8 (SIGFPE)
received by PID …`), else 0. Rendezvous differs by design: rank 0 hosts the store (env://) instead of an
elastic agent, which a single-node, no-restart run never needs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable

DEATH_TIMEOUT_S = 30.0  # torchrun's wait between SIGTERM and SIGKILL of the workers left after a failure
POLL_S = 0.1  # how often the launcher looks at its ranks: torchrun's --monitor-interval default
MASTER_ADDR = "127.0.0.1"


def free_port() -> int:
    """A port free on loopback now (torchrun --standalone picks its rendezvous port the same way)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((MASTER_ADDR, 0))
        return int(sock.getsockname()[1])


def rank_env(rank: int, world: int, port: int, run_id: str) -> dict[str, str]:
    """The variables torchrun's local agent gives worker `rank` of a one-node run (torch 2.x)."""
    size = str(world)
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "ROLE_RANK": str(rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": size,
        "WORLD_SIZE": size,
        "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": size,
        "MASTER_ADDR": MASTER_ADDR,
        "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "False",  # no agent: rank 0 hosts the store
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
    }


def describe(status: int, pid: int) -> list[str]:
    """torchrun's lines for a failed worker: its exit code (negative: the signal) and, for a signal, its name."""
    code = os.waitstatus_to_exitcode(status)
    lines = [f"  exitcode  : {code} (pid: {pid})"]
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        lines.append(f"  traceback : Signal {-code} ({name}) received by PID {pid}")
    return lines


def _rank(rank: int, world: int, port: int, run_id: str, run: Callable[[], int], die_with_parent: Callable[[], None]) -> None:
    """In a forked rank: become torchrun's worker `rank`, run the probe, never return."""
    code = 1
    try:
        die_with_parent()
        os.environ.update(rank_env(rank, world, port, run_id))
        if "OMP_NUM_THREADS" not in os.environ:  # torchrun: one thread per rank unless the user set it
            os.environ["OMP_NUM_THREADS"] = "1"
            import torch

            torch.set_num_threads(1)
        for stream in (sys.stdout, sys.stderr):  # torchrun runs `python -u`
            with contextlib.suppress(AttributeError, ValueError):
                stream.reconfigure(write_through=True)  # type: ignore[union-attr]
        code = run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed or broken stream: nothing more to say
                stream.flush()
        os._exit(code)


def launch(world: int, run: Callable[[], int], die_with_parent: Callable[[], None]) -> int:
    """Fork `world` ranks of `run` (each in this process group, so a kill of the group reaches them all),
    supervise them as torchrun does, and return the cell's exit status."""
    port, run_id = free_port(), uuid.uuid4().hex
    print(f"[envmatrix] {world} ranks forked by the environment's helper (torchrun's environment, master {MASTER_ADDR}:{port})", flush=True)
    sys.stderr.flush()
    ranks: dict[int, int] = {}  # pid → rank
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            _rank(rank, world, port, run_id, run, die_with_parent)
        ranks[pid] = rank
    failures: list[tuple[int, int, int]] = []  # (rank, pid, status), the first observed first
    stopping: float | None = None  # when the ranks left were sent SIGTERM
    while ranks:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            if stopping is not None and time.monotonic() > stopping + DEATH_TIMEOUT_S:
                _signal(ranks, signal.SIGKILL)
            time.sleep(POLL_S)
            continue
        rank = ranks.pop(pid)
        if status == 0:
            continue
        failures.append((rank, pid, status))  # stopped ranks too: torchrun lists them (exitcode -15)
        if stopping is None:  # torchrun stops the other workers at the first failure
            _signal(ranks, signal.SIGTERM)
            stopping = time.monotonic()
    if not failures:
        return 0
    print(summary(failures), file=sys.stderr, flush=True)
    return 1


def summary(failures: list[tuple[int, int, int]]) -> str:
    """torchrun's failure report, in its field names: the root cause (the first failure), then the others
    (those it stopped included, as torchrun lists them)."""

    def block(rank: int, pid: int, status: int) -> list[str]:
        return [f"  rank      : {rank} (local_rank: {rank})", *describe(status, pid)]

    (first, *others) = failures
    lines = ["[envmatrix] ranks FAILED", "Root Cause (first observed failure):", *block(*first)]
    if others:
        lines += ["Other failures:", *(line for failure in others for line in block(*failure))]
    return "\n".join(lines)


def _signal(ranks: dict[int, int], sig: int) -> None:
    for pid in ranks:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
