"""Two runners on one host, neither given its own GPUs: their cells take turns on a GPU (host/gpulease.py)."""

from __future__ import annotations

import io
import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console
from simulated import FakeBackend

from envmatrix.backends import Prepared
from envmatrix.host import gpulease
from envmatrix.plan.cells import Cell, Environment
from envmatrix.run.execute import Completed
from envmatrix.run.runner import Paths, Runner
from envmatrix.spec.matrix import Scenario

ROOT = Path(__file__).resolve().parents[3]


class Timed(FakeBackend):
    """A cell that takes 0.4 s on its GPUs, each noted with when it ran."""

    def __init__(self, spans: list[tuple[float, float, list[int]]]) -> None:
        super().__init__()
        self.spans = spans
        self.seen = "A100"

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        start = time.monotonic()
        time.sleep(0.4)
        self.spans.append((start, time.monotonic(), list(gpu_ids)))
        return super().run(ready, scenario, out, log, timeout=timeout, gpu_ids=gpu_ids)


def test_two_runners_given_every_gpu_never_run_cells_on_one_gpu_at_once(tmp_path: Path) -> None:
    spans: list[tuple[float, float, list[int]]] = []
    env = Environment(cuda="12.4", torch="2.5.1", transformers="4.49.0", flash_attn="none", gpu="A100", python="3.11")
    plan = [Cell(env, Scenario(name)) for name in ("a", "b")]
    runners = []
    for name in ("one", "two"):
        made = Runner(Timed(spans), Paths(tmp_path / name), gpus={"A100": [0, 1]}, jobs=2, console=Console(file=io.StringIO()))
        made.gpu_locks = tmp_path / "locks"
        runners.append(made)
    threads = [threading.Thread(target=r.run, args=(plan,)) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(spans) == 4  # each runner ran both its cells
    for gpu in (0, 1):
        on = sorted((s, e) for s, e, ids in spans if gpu in ids)
        assert all(later[0] >= earlier[1] - 0.01 for earlier, later in itertools.pairwise(on)), (gpu, on)


def test_a_gpu_held_by_another_process_is_waited_for_and_a_stop_gives_up(tmp_path: Path) -> None:
    folder = tmp_path / "locks"
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; from envmatrix.host import gpulease\n"
        f"with gpulease.held([1], folder=Path({str(folder)!r})):\n    print('held', flush=True); time.sleep(1.5)\n"
    )
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert other.stdout is not None and other.stdout.readline().strip() == "held"
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    with gpulease.held([0, 1], stop, folder) as free:
        assert free is False  # stopped while the other runner's cell had GPU 1
    start = time.monotonic()
    with gpulease.held([1], None, folder) as free:
        waited = time.monotonic() - start
    assert free is True and waited > 0.3  # it had to wait for the other process to let go
    assert other.wait(10) == 0


def test_locks_are_named_by_uuid_where_nvidia_smi_gives_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Slurm jobs on one node each see their GPU as index 0: the lock must name the GPU, not the index."""
    monkeypatch.setattr(gpulease, "_uuids", lambda: {0: "GPU-5e1c0000-aaaa", 1: "GPU-0b2d0000-bbbb"})
    assert gpulease.lock_names([1, 0]) == ["GPU-0b2d0000-bbbb.lock", "GPU-5e1c0000-aaaa.lock"]
    monkeypatch.setattr(gpulease, "_uuids", dict)
    assert gpulease.lock_names([3, 1]) == ["gpu1.lock", "gpu3.lock"]
