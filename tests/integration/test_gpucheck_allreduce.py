"""gpu-check's all-reduce script for real, over gloo on the CPU: spawned ranks find their function, the start
is guarded, the two ranks sum to 3.0 (on a GPU runner the same file runs over NCCL, on the host and in a container)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from envmatrix.answers.gpucheck import NCCL

pytestmark = [pytest.mark.integration, pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch in this interpreter")]


def test_the_all_reduce_script_runs_two_ranks(tmp_path: Path) -> None:
    script = tmp_path / "nccl_check.py"
    script.write_text(NCCL)
    done = subprocess.run([sys.executable, str(script), "gloo"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "all-reduce over 2 ranks (gloo) gave 3.0"
