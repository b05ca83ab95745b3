"""gpu-check on simulated runners: exit 3 without a GPU, one line per check, a driver too old for the profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from envmatrix.answers import gpucheck
from envmatrix.cli import main
from envmatrix.errors import BackendError
from envmatrix.host.gpus import HostGpu, HostGpus
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parents[3]
GPU = load(ROOT / "matrix.yaml").profiles["gpu"]


def h20(driver: str, count: int = 8) -> HostGpus:
    devices = tuple(HostGpu(i, "NVIDIA H20", driver, 97871, "9.0", "H20") for i in range(count))
    return HostGpus(tuple(d.name for d in devices), "H20", devices)


def test_without_a_gpu_it_exits_3_saying_so(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("envmatrix.cli.gpucheck.detect_gpus", lambda: HostGpus((), "cpu"))
    assert main(["gpu-check", "--file", str(ROOT / "matrix.yaml")]) == 3
    assert "no GPU on this host: gpu-check tests a GPU runner" in capsys.readouterr().err
    with pytest.raises(BackendError):
        gpucheck.run_checks(HostGpus((), "cpu", problem="nvidia-smi exited 9"), GPU, print)


def test_a_driver_too_old_for_the_profiles_cuda_13_builds_fails_naming_both() -> None:
    old = gpucheck.check_driver(h20("550.54.15"), GPU)
    assert old.status == gpucheck.FAIL and "≥ 580.65.06" in old.detail and "550.54.15" in old.detail
    assert gpucheck.check_driver(h20("580.82.07"), GPU).status == gpucheck.PASS


def test_every_check_gives_one_line_and_the_exit_status_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpucheck, "_python", lambda code, *args, **kw: (0, "True 64.0") if "bf16" in code else (0, "fine"))
    monkeypatch.setattr(gpucheck, "check_container_runtime", lambda g, p: gpucheck.Check("container runtime", gpucheck.SKIP, "no engine"))
    monkeypatch.setattr(gpucheck, "CHECKS", (gpucheck.check_driver, gpucheck.check_bf16, gpucheck.check_nccl))
    lines: list[str] = []
    checks = gpucheck.run_checks(h20("580.82.07", count=1), GPU, lambda c: lines.append(c.line))
    assert [c.status for c in checks] == ["pass", "pass", "skip"] and lines[2].startswith("skip  nccl all-reduce: needs 2 GPUs")
