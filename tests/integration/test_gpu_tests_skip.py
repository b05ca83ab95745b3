"""`nox -s tests` on a GPU host whose test venv has the CPU torch: tests/gpu are skipped with the reason,
never failed (a stand-in nvidia-smi makes this machine look like one: tests/simulated.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from simulated import MIXED, fake_smi

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_tests_gpu_skip_on_a_simulated_gpu_host_with_the_cpu_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this interpreter's torch is a CUDA build: tests/gpu run for real here")
    env = {**os.environ, "PATH": f"{fake_smi(tmp_path / 'bin', MIXED)}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-rs", "-p", "no:cacheprovider"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=600
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\d+ skipped", summary) and "failed" not in summary and "passed" not in summary and "error" not in summary, summary
    assert "is a CPU build (torch.version.cuda is None)" in out and "nox -s gpu-tests" in out, out[-3000:]
