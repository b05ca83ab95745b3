"""A plain install runs: `pip install .` into a fresh venv, nothing else by hand, then one cell of the
cpu profile — uv (a dependency) resolves and builds, pip's own index settings reach it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CELL = "cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11/fp32-sdpa"
pytestmark = pytest.mark.integration


def test_pip_install_then_run_one_cell(tmp_path: Path) -> None:
    venv = tmp_path / "plain"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    cmd = [str(venv / "bin" / "envmatrix"), "run", "--profile", "cpu", "--file", str(ROOT / "matrix.yaml"), "--only", CELL,
           "--reports", str(tmp_path / "reports"), "--venvs", str(tmp_path / "venvs")]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "reports" / "results").glob("*.json")]
    assert record["cell"]["id"] == CELL and record["outcome"]["class"] == "ok", record["outcome"]
    assert (tmp_path / "reports" / "matrix.html").is_file() and (tmp_path / "reports" / "vetted.json").is_file()
