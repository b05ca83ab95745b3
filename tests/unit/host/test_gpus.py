"""Host facts read once from nvidia-smi (simulated runners: a fake nvidia-smi on PATH answering the query as
the real one prints it), and plans that know the host's driver."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from simulated import MIXED, MixedHost, fake_smi, fake_uuid

from envmatrix.cli import main
from envmatrix.host.gpus import detect_gpus, parse_query, visible_devices
from envmatrix.records.record import load_records

ROOT = Path(__file__).resolve().parents[3]
H20 = "NVIDIA H20"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def make(gpus: list[tuple[str, str, int, str]], fail: str | None = None) -> None:
        monkeypatch.setenv("PATH", f"{fake_smi(tmp_path / 'bin', gpus, fail=fail)}{os.pathsep}{os.environ['PATH']}")

    return make


NAMES = [("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"), ("NVIDIA H100 80GB HBM3", "H100"), (H20, "H20"), ("NVIDIA B200", "B200")]


@pytest.mark.parametrize(("name", "matrix"), NAMES)
def test_names_as_nvidia_smi_prints_them(name: str, matrix: str, host) -> None:  # type: ignore[no-untyped-def]
    host([(name, "580.82.07", 81920, "9.0")] * 2)
    gpus = detect_gpus()
    assert gpus.count == 2 and gpus.matrix_name == matrix and gpus.driver == "580.82.07"
    assert gpus.types() == {matrix: [0, 1]} and gpus.devices[0].memory_mib == 81920


def test_a_mixed_host_lists_each_type_by_index(host) -> None:  # type: ignore[no-untyped-def]
    host([(H20, "550.54.15", 97871, "9.0"), ("NVIDIA A100-SXM4-80GB", "550.54.15", 81920, "8.0"), (H20, "550.54.15", 97871, "9.0")])
    assert detect_gpus().types() == {"H20": [0, 2], "A100": [1]}


@pytest.mark.parametrize(
    ("given", "indexes"),
    [("2,0", [0, 2]), (f"{fake_uuid(3)},{fake_uuid(1)[:12]}", [1, 3]), ("1,-1,3", [1]), ("", []), (None, [0, 1, 2, 3])],
)
def test_a_runner_uses_only_the_gpus_it_was_given(host, monkeypatch: pytest.MonkeyPatch, given: str | None, indexes: list[int]) -> None:  # type: ignore[no-untyped-def]
    """A scheduler's allocation (CUDA_VISIBLE_DEVICES, by index or UUID prefix) bounds what the runner hands out; CUDA stops
    reading the list at an invalid entry; each GPU keeps its nvidia-smi index and UUID (Docker is told the UUID)."""
    host(MIXED)
    if given is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", given)
    gpus = detect_gpus()
    assert [g.index for g in gpus.devices] == indexes and gpus.count == len(indexes)
    assert gpus.device_ids(indexes) == [fake_uuid(i) for i in indexes]


def test_a_failing_driver_is_a_cpu_runner_that_says_why(host) -> None:  # type: ignore[no-untyped-def]
    host([], fail="NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    gpus = detect_gpus()
    assert gpus.count == 0 and gpus.problem is not None and "couldn't communicate with the NVIDIA driver" in gpus.problem


def test_lines_that_do_not_parse_are_left_out() -> None:
    assert [g.name for g in parse_query("0, NVIDIA H20, 550.54.15, 97871, 9.0\ngarbage\n1, NVIDIA L4, 535.1, [N/A], [N/A]\n")] == ["NVIDIA H20", "NVIDIA L4"]


def plan(capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, object]]:
    assert main(["plan", "--file", str(ROOT / "matrix.yaml"), "--profile", "gpu", "--format", "json", *args]) == 0
    cells: list[dict[str, object]] = json.loads(capsys.readouterr().out)["cells"]
    return cells


def test_an_old_driver_skips_the_cuda_builds_it_cannot_run(host, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    host([(H20, "550.54.15", 97871, "9.0")] * 8)
    cells = [c for c in plan(capsys) if c["gpu"] == "H20"]
    cuda13 = [c for c in cells if str(c["cuda"]).startswith("13.")]
    assert cuda13 and all(c["status"] == "skipped" and "driver ≥ 580.65.06" in str(c["reason"]) and "550.54.15" in str(c["reason"]) for c in cuda13)
    assert all("host" in c["kinds"] for c in cuda13)  # type: ignore[operator]
    assert any(c["status"] == "planned" for c in cells if c["cuda"] == "12.8")
    other = [c for c in plan(capsys, "--gpu", "A100") if str(c["cuda"]).startswith("13.")]  # planning for another host
    assert any(c["status"] == "planned" for c in other)
    # a new driver plans them
    host([(H20, "580.82.07", 97871, "9.0")] * 8)
    assert any(c["status"] == "planned" for c in plan(capsys) if c["gpu"] == "H20" and str(c["cuda"]).startswith("13."))


def mixed_matrix(data: dict[str, Any]) -> None:
    """The conftest matrix with DDP scenarios, no flash-attn, and a GPU type this host lacks."""
    fp32 = {"dtype": "fp32", "attn": "sdpa"}
    data["scenarios"] = {"fp32-sdpa": fp32, "ddp2": {**fp32, "world_size": 2}, "ddp4": {**fp32, "world_size": 4}}
    data["profiles"]["gpu"].update(flash_attn=["none"], gpu=["A100", "H20", "B200"])


def test_a_plan_for_a_mixed_host_counts_the_gpus_of_each_cells_type(host, matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    host(MIXED)
    cells = plan(capsys, "--file", str(matrix(mixed_matrix)))
    for gpu in ("A100", "H20"):
        ddp4 = [c for c in cells if c["gpu"] == gpu and c["scenario"] == "ddp4"]
        assert ddp4 and all(f"needs 4 {gpu} GPUs; this runner has 2" in str(c["reason"]) for c in ddp4)  # 2 of its type, not 4 GPUs
        assert any(c["status"] == "planned" for c in cells if c["gpu"] == gpu and c["scenario"] == "ddp2")
    assert all("this runner" not in str(c["reason"]) for c in cells if c["gpu"] == "B200")  # another host's cells: not judged here


def test_visible_devices_name_nvidia_smi_indexes_in_its_pci_order() -> None:
    assert visible_devices([1, 3]) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,3"}
    assert visible_devices([]) == {}


def test_envmatrix_run_on_a_mixed_host_runs_each_type_on_its_own_gpus(
    host, matrix: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:  # type: ignore[no-untyped-def]
    host(MIXED)
    backends: list[MixedHost] = []
    monkeypatch.setattr("envmatrix.cli.run.make_backend", lambda name, options: backends.append(MixedHost(detect_gpus())) or backends[-1])

    args = ["--file", str(matrix(mixed_matrix)), "--profile", "gpu", "--backend", "host", "--no-resolve", "--jobs", "4", "--reports", str(tmp_path / "r")]
    assert main(["run", *args]) == 0
    out = capsys.readouterr().out
    assert "GPU types run here: A100 on 2 GPUs (0,2), H20 on 2 GPUs (1,3)" in " ".join(out.split())
    records = load_records(tmp_path / "r" / "results")
    assert {r.cell.gpu for r in records} == {"A100", "H20"}  # B200 cells are left for a B200 runner
    for r in records:
        own = {"A100": {0, 2}, "H20": {1, 3}}[r.cell.gpu]
        if r.cell.scenario == "ddp4":
            assert r.klass == "skipped" and f"needs 4 {r.cell.gpu} GPUs; this runner has 2" in r.outcome.evidence
        else:
            assert r.klass == "ok" and set(r.gpu_ids) <= own and len(r.gpu_ids) == (2 if r.cell.scenario == "ddp2" else 1)
    assert {tuple(sorted(ids)) for _, ids in backends[0].ran if len(ids) == 2} == {(0, 2), (1, 3)}
