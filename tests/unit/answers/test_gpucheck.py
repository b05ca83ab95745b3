"""gpu-check on simulated runners: exit 3 without a GPU, one line per check, a driver too old for the profile, and
the NCCL all-reduce on two GPUs of one type, on the host and in a container started as a cell's (a fake engine)."""

from __future__ import annotations

from pathlib import Path

import pytest
from simulated import MIXED, FakeContainer, FakeDocker, FakeImage, smi_lines

from envmatrix.answers import gpucheck
from envmatrix.cli import main
from envmatrix.errors import BackendError
from envmatrix.host.gpus import HostGpu, HostGpus, parse_query
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


MIXED_HOST = HostGpus(tuple(g.name for g in parse_query(smi_lines(MIXED))), "A100", parse_query(smi_lines(MIXED)))
NCCL_SAID = b"all-reduce over 2 ranks (nccl) gave 3.0\n"


def test_nccl_runs_on_two_gpus_of_one_type_from_a_script_file(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, tuple[str, ...], dict[str, str] | None]] = []

    def python(code: str, *args: str, env: dict[str, str] | None = None, **kw: object) -> tuple[int, str]:
        calls.append((code, args, env))
        assert Path(args[0]).read_text() == gpucheck.NCCL  # a file: spawned ranks import the main module by path
        return 0, "all-reduce over 2 ranks (nccl) gave 3.0"

    monkeypatch.setattr(gpucheck, "_python", python)
    assert gpucheck.nccl_pair(MIXED_HOST) == [0, 2]  # the A100s, never an A100 with an H20
    assert gpucheck.check_nccl(MIXED_HOST, GPU).status == gpucheck.PASS
    ((code, _, env),) = calls
    assert code == "" and env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0,2"}
    one_each = HostGpus(("NVIDIA A100-SXM4-80GB", "NVIDIA H20"), "A100", MIXED_HOST.devices[:2])
    skipped = gpucheck.check_nccl_container(one_each, GPU)
    assert skipped.status == gpucheck.SKIP and skipped.detail == "needs 2 GPUs of one type; this host has 1 A100, 1 H20"


def engine(monkeypatch: pytest.MonkeyPatch, client: FakeDocker | None, why: str = "") -> None:
    """The Docker engine gpu-check finds: `client`, or none (connect raises saying `why`)."""

    def connect() -> FakeDocker:
        if client is None:
            raise BackendError(why)
        return client

    monkeypatch.setattr("envmatrix.backends.docker.connect", connect)


def test_nccl_in_a_container_says_why_it_was_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    engine(monkeypatch, None, "no Docker engine reachable (connection refused): start dockerd")
    no_engine = gpucheck.check_nccl_container(h20("580.82.07"), GPU)
    assert no_engine.status == gpucheck.SKIP and "no Docker engine reachable" in no_engine.detail
    engine(monkeypatch, FakeDocker(runtimes=("runc",), images=[FakeImage("envmatrix-probe:a", "12.8.1")]))
    no_runtime = gpucheck.check_nccl_container(h20("580.82.07"), GPU)
    assert no_runtime.status == gpucheck.SKIP and "no NVIDIA container toolkit" in no_runtime.detail
    engine(monkeypatch, FakeDocker(images=[FakeImage("envmatrix-probe:cpu"), FakeImage("envmatrix-probe:cu13", "13.0.1"), FakeImage("other:1", "12.8.1")]))
    no_image = gpucheck.check_nccl_container(h20("550.54.15"), GPU)  # a CPU image, one this driver cannot run, another repository's
    assert no_image.status == gpucheck.SKIP and "no probe image with a CUDA driver 550.54.15 runs" in no_image.detail


def test_nccl_in_a_container_runs_as_a_cell_in_the_newest_image_the_driver_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    images = [
        FakeImage("envmatrix-probe:old", "12.4.1", "2025-01-01T00:00:00Z"),
        FakeImage("envmatrix-probe:new", "12.8.1", "2026-02-01T00:00:00Z"),
        FakeImage("envmatrix-probe:cu13", "13.0.1", "2026-03-01T00:00:00Z"),
    ]
    client = FakeDocker(FakeContainer(output=b"[rank0] hello\n" + NCCL_SAID), images=images)
    engine(monkeypatch, client)
    check = gpucheck.check_nccl_container(MIXED_HOST, GPU)  # driver 570: CUDA 13 is out of reach
    assert check.status == gpucheck.PASS and check.detail == "all-reduce over 2 ranks (nccl) gave 3.0 in envmatrix-probe:new (CUDA 12.8.1), GPUs 0,2"
    ((image, command, options),) = client.started
    assert image == "envmatrix-probe:new" and command == ["python", "/out/check.py"]
    (request,) = options["device_requests"]  # type: ignore[misc]
    assert request["DeviceIDs"] == [g.uuid or str(g.index) for g in MIXED_HOST.devices if g.index in (0, 2)]
    assert options["shm_size"] == "2g" and options["ipc_mode"] == "private"
    assert options["network_mode"] == "none" and options["cap_drop"] == ["ALL"] and client.container.removed
    engine(monkeypatch, FakeDocker(FakeContainer(code=1, output=b"torch.distributed.DistBackendError: NCCL error: unhandled system error\n"), images=images))
    failed = gpucheck.check_nccl_container(MIXED_HOST, GPU)
    assert failed.status == gpucheck.FAIL and failed.detail.startswith("torch.distributed.DistBackendError: NCCL error")


def test_the_container_runtime_check_tries_a_container_with_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered toolkit is not enough: the check starts a container given a GPU (the real engine's side of that is
    tests/integration/test_hosts_docker.py; here the engine's answer is given)."""
    said: list[tuple[str, list[str]]] = []

    def answer(problem: str | None) -> None:
        def tried(client: object, image: str, device_ids: list[str]) -> str | None:
            said.append((image, device_ids))
            return problem

        monkeypatch.setattr("envmatrix.host.dockerfs.gpu_container_problem", tried)

    images = [FakeImage("envmatrix-probe:new", "12.8.1", "2026-02-01T00:00:00Z")]
    engine(monkeypatch, FakeDocker(runtimes=("runc",), images=images))
    no_toolkit = gpucheck.check_container_runtime(h20("570.86.15"), GPU)
    assert no_toolkit.status == gpucheck.FAIL and "no NVIDIA container toolkit" in no_toolkit.detail and said == []
    answer('could not select device driver "" with capabilities: [[gpu]]')
    engine(monkeypatch, FakeDocker(images=images))
    broken = gpucheck.check_container_runtime(h20("570.86.15"), GPU)
    assert broken.status == gpucheck.FAIL and "could not select device driver" in broken.detail
    assert said == [("envmatrix-probe:new", ["0"])]  # the newest CUDA image, one of this runner's GPUs
    answer(None)
    engine(monkeypatch, FakeDocker(images=images))
    ok = gpucheck.check_container_runtime(h20("570.86.15"), GPU)
    assert ok.status == gpucheck.PASS and "envmatrix-probe:new" in ok.detail
    engine(monkeypatch, FakeDocker(images=[]))
    untried = gpucheck.check_container_runtime(h20("570.86.15"), GPU)
    assert untried.status == gpucheck.SKIP and "no container with a GPU was tried" in untried.detail
