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
    assert re.search(rf"first release with ok: {re.escape(GOOD)} \(the release before it, {re.escape(BAD)}, shows \w+\)", out)
    assert len(list((tmp_path / "reports" / "results").glob("*.json"))) == 2  # both releases recorded like any cell
