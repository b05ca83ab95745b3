"""Nothing outside the cell: with HOME pointing at an empty folder, a matrix cell and a --trust-remote-code
preflight (remote code copied into a modules cache) leave it empty; the fork helper refuses to fork once the CUDA
driver was initialised during its imports (a stand-in driver library where no GPU exists)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import write_host_matrix
from user_models import remote_model

from envmatrix.run.forkclient import start_process_helper

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (nox -s tests installs it)"),
]
ROOT = Path(__file__).resolve().parents[2]


def fresh_home_env(home: Path) -> dict[str, str]:
    """This environment with HOME at an empty folder and no cache variable of the caller's (a fresh user)."""
    home.mkdir()
    drop = ("HF_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "HOME": str(home)}


def everything_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_trusted_remote_code_preflight_writes_nothing_in_home(tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path / "home")
    folder = remote_model(tmp_path)
    cmd = [sys.executable, "-m", "envmatrix", "preflight", "--file", str(ROOT / "matrix.yaml"), "--profile", "cpu"]
    cmd += ["--reports", str(tmp_path / "reports"), "--model-config", str(folder), "--trust-remote-code", "--format", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (folder / "RAN").exists()  # the remote code ran ...
    assert everything_under(tmp_path / "home") == []  # ... and nothing of it (or of any cache) is in HOME
    copied = [p for p in (tmp_path / "reports").rglob("configuration_acme.py")]
    assert copied and all("/.hf/modules/" in str(p) for p in copied), copied  # in the cell's own hub folder


def test_a_matrix_cell_writes_nothing_in_home(tmp_path: Path) -> None:
    env = fresh_home_env(tmp_path / "home")
    matrix = write_host_matrix(tmp_path, {"fp32-sdpa": {"steps": 2}})
    cmd = [sys.executable, "-m", "envmatrix", "run", "--file", str(matrix), "--profile", "cpu", "--backend", "host", "--reports", str(tmp_path / "reports")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "✓ ok" in done.stdout
    assert everything_under(tmp_path / "home") == []


@pytest.fixture
def initialising_driver(tmp_path: Path) -> Path:
    """A sitecustomize that loads a stand-in libcuda and calls cuInit, as `torch.cuda.is_available()` does when
    transformers imports it (flash-attn installed): the folder to put on the helper's PYTHONPATH."""
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the stand-in CUDA driver library")
    lib = tmp_path / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(ROOT / "tests" / "data" / "fakecuda" / "libcuda.c")], check=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(f"import ctypes\nctypes.CDLL({str(lib)!r}).cuInit(0)\n")
    return site


def test_the_fork_helper_refuses_to_fork_after_the_driver_was_initialised(initialising_driver: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(initialising_driver), str(ROOT)])}
    helper = start_process_helper(sys.executable, env)
    try:
        assert not helper.fork and helper.reason is not None, helper.reason
        assert "the CUDA driver was initialised during the imports" in helper.reason and "libcuda.so.1" in helper.reason
    finally:
        helper.close()
    plain = start_process_helper(sys.executable, {**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert plain.fork, plain.reason  # the same helper without the driver call forks
    finally:
        plain.close()
