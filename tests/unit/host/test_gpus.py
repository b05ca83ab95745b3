"""Host facts read once from nvidia-smi (simulated runners: a fake nvidia-smi on PATH answering the query as
the real one prints it), and plans that know the host's driver."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from envmatrix.cli import main
from envmatrix.host.gpus import QUERY, detect_gpus, parse_query

ROOT = Path(__file__).resolve().parents[3]
H20 = "NVIDIA H20"


def fake_smi(folder: Path, gpus: list[tuple[str, str, int, str]], *, fail: str | None = None) -> Path:
    """A nvidia-smi that answers `QUERY --format=csv,noheader,nounits` with these GPUs (name, driver, MiB, cc),
    or fails as a broken driver does."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "\\n".join(f"{i}, {name}, {driver}, {mib}, {cc}" for i, (name, driver, mib, cc) in enumerate(gpus))
    body = f'echo "{fail}"; exit 9' if fail else f'[ "$1" = "{QUERY}" ] || exit 2\nprintf "{lines}\\n"'
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


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
