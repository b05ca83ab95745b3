"""init --current and one watch step on a GPU host, through the host backend: this interpreter (a CUDA torch) read into
a profile, then its baseline cells run here. Skipped without a GPU, saying why."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from envmatrix.host.gpus import detect_gpus
from envmatrix.spec.matrix import load

GPUS = detect_gpus()
ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(GPUS.count == 0, reason=f"needs an NVIDIA GPU; this host has none{f' ({GPUS.problem})' if GPUS.problem else ''}"),
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None, reason="needs torch and transformers here"
    ),
]


def test_init_current_then_the_baseline_on_the_host_backend(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    init = subprocess.run(
        [sys.executable, "-m", "envmatrix", "init", "--current", "--file", str(matrix)], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert init.returncode == 0, init.stderr
    profile = load(matrix).profiles["stack"]
    assert profile.axes["gpu"] == (GPUS.matrix_name,) and profile.axes["cuda"] != ("none",), "this host's GPU and torch's CUDA build"
    cmd = [sys.executable, "-m", "envmatrix", "watch", "--file", str(matrix), "--backend", "host", "--reports", str(tmp_path / "reports"), "--format", "json"]
    watch = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    assert watch.returncode in (0, 1), watch.stderr[-3000:]
    answer = json.loads(watch.stdout)
    assert answer["baseline"]["cells"] and all(c["class"] != "build_failed" for c in answer["baseline"]["cells"].values())
    assert answer["runs"]["ran"] == len(answer["baseline"]["cells"]), "the host backend runs the baseline only"
