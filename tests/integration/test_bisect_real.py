"""`envmatrix bisect` for real: venvs from the index, real probe runs, between two adjacent releases.

Each release is a real venv (torch + transformers from PyPI, 30-90 s each), so this is opt-in:
ENVMATRIX_REAL_BISECT=1. The range defaults to the boundary the full run found (transformers 4.57.6 → 5.0.0); set
ENVMATRIX_BISECT_BAD / ENVMATRIX_BISECT_GOOD to another adjacent pair.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.environ.get("ENVMATRIX_REAL_BISECT") != "1", reason="builds real venvs from PyPI (minutes): set ENVMATRIX_REAL_BISECT=1"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (nox -s tests installs it)"),
]

BAD = os.environ.get("ENVMATRIX_BISECT_BAD", "4.57.6")
GOOD = os.environ.get("ENVMATRIX_BISECT_GOOD", "5.0.0")


def test_adjacent_releases_bisect_to_the_newer_one(tmp_path: Path) -> None:
    venvs = Path(os.environ.get("ENVMATRIX_VENVS", ROOT / ".envmatrix" / "venvs"))
    cmd = [sys.executable, "-m", "envmatrix", "bisect", "--axis", "transformers", "--good", GOOD, "--bad", BAD,
           "--scenario", "frozen-emb-reentrant", "--profile", "cpu", "--file", str(ROOT / "matrix.yaml"),
           "--reports", str(tmp_path / "reports"), "--venvs", str(venvs)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    out = " ".join((done.stdout + done.stderr).split())
    assert "Traceback" not in out
    if done.returncode == 2:  # the endpoints do not show ok/failure as claimed: said so, nothing bisected
        assert "not the" in out and "claimed" in out
        return
    assert done.returncode == 0, out
    assert re.search(rf"first release whose outcome is not \w+: {re.escape(GOOD)} \(ok\); {re.escape(BAD)} before it shows \w+", out)
    assert len(list((tmp_path / "reports" / "results").glob("*.json"))) == 2  # both releases recorded like any cell


@pytest.mark.skipif(os.environ.get("ENVMATRIX_REAL_BISECT") != "1", reason="builds about ten venvs (minutes)")
def test_where_it_stops_working_whatever_the_failure_then_where_the_failure_changes(tmp_path: Path) -> None:
    """The question the issue asks: trl 0.19.1 trains on transformers 5.0.0 and stops on 5.1.0 (error: an API it still uses
    is gone); later releases fail otherwise (missing_module: requests is no longer installed). Not 'changes more than once'."""
    venvs = Path(os.environ.get("ENVMATRIX_VENVS", ROOT / ".envmatrix" / "venvs"))
    cmd = [sys.executable, "-m", "envmatrix", "bisect", "--axis", "transformers", "--good", "4.57.6", "--bad", "5.23.0",
           "--scenario", "trl-grpo", "--profile", "cpu", "--set", "trl=0.19.1", "--file", str(ROOT / "matrix.yaml"),
           "--reports", str(tmp_path / "reports"), "--venvs", str(venvs)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, cwd=tmp_path)
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == 0, out
    assert "first release whose outcome is not ok: 5.1.0 (error); 5.0.0 before it shows ok" in out
    assert re.search(r"then missing_module from 5\.\d+\.\d+", out) and "changes more than once" not in out
