"""`envmatrix init` then `envmatrix watch` for real: venvs from the index, real probe runs, the acceptance stack of
issue 36 (torch 2.13.0, transformers 4.51.3, trl 0.18.2, accelerate 1.2.1). Opt-in (ENVMATRIX_REAL_WATCH=1): a cold
run builds about 25 venvs and runs about 35 cells (20-25 min on two cores); a second run runs nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("ENVMATRIX_REAL_WATCH") != "1", reason="builds real venvs from the index (20+ minutes): set ENVMATRIX_REAL_WATCH=1"),
]


def envmatrix(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envmatrix", *args], capture_output=True, text=True, timeout=7200, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )


def test_watch_finds_what_breaks_the_stack_and_runs_nothing_the_second_time(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("torch==2.13.0\ntransformers==4.51.3\ntrl==0.18.2\naccelerate==1.2.1\n")
    assert envmatrix("init", "--from", "requirements.txt", "--gpu", "cpu", cwd=tmp_path).returncode == 0
    venvs = os.environ.get("ENVMATRIX_VENVS", str(tmp_path / ".envmatrix" / "venvs"))
    first = envmatrix("watch", "--format", "json", "--venvs", venvs, "--summary", "summary.md", cwd=tmp_path)
    assert first.returncode == 1, first.stderr[-3000:]
    answer = json.loads(first.stdout)
    assert answer["baseline"]["cells"]["trl-grpo"]["class"] == "ok"
    broke = next(r for r in answer["regressions"] if r["axis"] == "transformers" and r["scenario"] == "trl-grpo")
    assert broke["bisection"]["status"] == "found" and broke["bisection"]["before"] == "4.51.3"
    assert any(o["axis"] == "transformers" for o in answer["orders"])
    second = envmatrix("watch", "--format", "json", "--venvs", venvs, cwd=tmp_path)
    again = json.loads(second.stdout)
    assert again["runs"]["ran"] == 0 and again["regressions"] == answer["regressions"] and again["orders"] == answer["orders"]
