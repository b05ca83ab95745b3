"""The docker backend on a real engine: build the CPU probe image, run a healthy scenario and a control
in containers, and check what containers must never do (keep running, run as root, outlive the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from envmatrix.backends.docker import DockerBackend, connect
from envmatrix.errors import BackendError
from envmatrix.facts.catalog import CPU_BASE_IMAGE as CPU_BASE

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.integration


@pytest.fixture
def client(docker_client: Any) -> Any:
    """The engine (the root conftest's `docker_client`), under the name these tests use."""
    return docker_client


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envmatrix", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)


def leftover_containers() -> list[str]:
    return [c.id for c in connect().containers.list(all=True, filters={"label": "envmatrix=cell"})]


def test_docker_backend_runs_a_healthy_scenario_and_a_control(tmp_path: Path, client: Any) -> None:
    reports = tmp_path / "reports"
    only = "cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11/{fp32-sdpa,ctl-zero-grad}"
    got = run("run", "--backend", "docker", "--profile", "cpu", "--only", only, "--reports", str(reports))
    assert got.returncode == 0, got.stdout + got.stderr
    records = {r["cell"]["scenario"]: r for r in (json.loads(p.read_text()) for p in (reports / "results").glob("*.json"))}
    assert records["fp32-sdpa"]["outcome"]["class"] == "ok", records["fp32-sdpa"]["outcome"]
    assert records["ctl-zero-grad"]["outcome"]["class"] == "zero_grad" and records["ctl-zero-grad"]["control"] == "reproduced"
    build = records["fp32-sdpa"]["environment"]["build"]
    assert build["tool"] == "docker" and build["image"].startswith("envmatrix-probe:") and build["base_image"] == CPU_BASE
    assert "transformers==4.57.6" in build["freeze"]
    facts = records["fp32-sdpa"]["environment"]["facts"]
    assert facts["transformers"] == "4.57.6" and facts["torch"] == "2.13.0+cpu"
    result_file = reports / "runs" / (records["fp32-sdpa"]["cell"]["id"].replace("/", "__")) / "result.json"
    assert result_file.stat().st_uid == 1000  # written by the unprivileged probe user (the runner is root here)
    assert result_file.parent.stat().st_mode & 0o777 == 0o700  # a private folder, not world-writable
    assert leftover_containers() == []


def long_matrix(tmp_path: Path) -> Path:
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    data["scenarios"] = {"long": {"steps": 10000}}
    axes = {k: v for k, v in data["profiles"]["cpu"].items() if k not in ("exclude", "include", "packages")}
    data["profiles"] = {"cpu": {**axes, "transformers": ["4.57.6"], "scenarios": ["long"]}}
    path = tmp_path / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_runner_killed_with_sigkill_leaves_no_container_behind_the_next_run(tmp_path: Path, client: Any) -> None:
    """kill -9 of the runner cannot stop its container; the next run on this host finds and removes it."""
    reports = tmp_path / "reports"
    args = [sys.executable, "-m", "envmatrix", "run", "--file", str(long_matrix(tmp_path)), "--backend", "docker", "--reports", str(reports)]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 900
    while not leftover_containers() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(1)
    assert leftover_containers(), "the long cell's container never started"
    proc.kill()
    proc.wait()
    time.sleep(2)
    assert leftover_containers(), "the container should outlive a runner killed with SIGKILL"
    got = run("run", "--file", str(long_matrix(tmp_path)), "--backend", "docker", "--timeout", "20", "--reports", str(reports))
    assert got.returncode == 0, got.stdout + got.stderr
    assert leftover_containers() == []


def test_timeout_kills_and_removes_the_container(tmp_path: Path, client: Any) -> None:
    reports = tmp_path / "reports"
    got = run("run", "--file", str(long_matrix(tmp_path)), "--backend", "docker", "--timeout", "45", "--reports", str(reports))
    assert got.returncode == 0, got.stdout + got.stderr
    (record,) = [json.loads(p.read_text()) for p in (reports / "results").glob("*.json")]
    assert record["outcome"]["class"] == "timeout" and record["timed_out"]
    assert leftover_containers() == []


def test_no_engine_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/absent.sock"}
    got = run("run", "--backend", "docker", "--profile", "cpu", "--reports", str(tmp_path / "r"), env=env)
    assert got.returncode == 3
    assert "no Docker engine reachable" in got.stderr and "start dockerd" in got.stderr


def test_gpu_cells_need_the_nvidia_runtime(client: Any) -> None:
    backend = DockerBackend()
    if "nvidia" in (backend.client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime")
    with pytest.raises(BackendError, match="NVIDIA container toolkit"):
        backend.require_gpu_runtime()
