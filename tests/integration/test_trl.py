"""TRL's GRPOTrainer for real on CPU: a package axis end to end (plan → venv with trl pinned → probe's
TRL path → record → lock that installs with --require-hashes).

The environment is a real venv the venv backend builds with uv (torch from pip's configured find-links,
never a CUDA build); trl is not installed into the test environment itself.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (nox -s tests installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("uv") is None, reason="needs uv (test extras) to build the TRL venv"),
]

TRL = "1.16.0"
TRANSFORMERS = "4.57.6"
SCENARIOS = {
    "trl-grpo": {"trainer": "trl"},
    "trl-ctl-zero-grad": {"trainer": "trl", "temperature": 0.01, "top_p": 0.001, "expect": "zero_grad"},
    "trl-ctl-one-generation": {"trainer": "trl", "num_generations": 1, "expect": "error"},
}


def envmatrix(*args: str, cwd: Path, timeout: float = 1800) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "envmatrix", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def matrix(tmp: Path) -> Path:
    from importlib.metadata import version

    data: dict[str, Any] = {
        "version": 1,
        "profiles": {
            "cpu": {
                "cuda": ["none"],
                "torch": [version("torch").split("+")[0]],
                "transformers": ["4.51.3", TRANSFORMERS],
                "flash_attn": ["none"],
                "gpu": ["cpu"],
                "python": [f"{sys.version_info.major}.{sys.version_info.minor}"],
                "packages": {"trl": [TRL]},
            }
        },
        "scenarios": SCENARIOS,
    }
    path = tmp / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_trl_cells_train_classify_and_lock(tmp_path: Path) -> None:
    path = matrix(tmp_path)
    code, out = envmatrix("plan", "--file", str(path), "--format", "json", cwd=tmp_path)
    assert code == 0, out
    cells = json.loads(out)["cells"]
    old = [c for c in cells if c["transformers"] == "4.51.3"]
    assert old and all(c["status"] == "skipped" and f"trl {TRL} requires transformers>=" in c["reason"] for c in old)

    reports = tmp_path / "r"
    args = ("run", "--file", str(path), "--profile", "cpu", "--backend", "venv", "--venvs", str(tmp_path / "venvs"), "--reports", str(reports))
    code, out = envmatrix(*args, cwd=tmp_path)
    assert code == 0, out
    recs = {r["cell"]["scenario"]: r for r in (json.loads(p.read_text()) for p in (reports / "results").glob("*.json")) if r["status"] == "done"}
    assert set(recs) == set(SCENARIOS), out
    # forked by a helper that imported trl's trainer too (with datasets: pyarrow's jemalloc thread is fork-safe)
    assert {r["launch"] for r in recs.values()} == {"forked"}, {k: r["launch"] for k, r in recs.items()}

    healthy = recs["trl-grpo"]
    assert healthy["cell"]["packages"] == {"trl": TRL} and f"-trl{TRL}-" in healthy["cell"]["env"]
    assert f"trl=={TRL}" in healthy["environment"]["build"]["freeze"]
    assert healthy["outcome"]["class"] == "ok", healthy["outcome"]
    assert healthy["result"]["trl"]["version"] == TRL
    assert healthy["result"]["params"]["all_changed"] and healthy["result"]["params"]["all_got_grad"]
    first = healthy["metrics"][0]
    assert first["grad_norm"] > 0 and {"loss", "reward", "reward_std", "frac_reward_zero_std", "completions/mean_length"} <= set(first)
    assert healthy["result"]["samples"]

    assert recs["trl-ctl-zero-grad"]["outcome"]["class"] == "zero_grad", recs["trl-ctl-zero-grad"]["outcome"]
    assert all(m["grad_norm"] == 0 and m["frac_reward_zero_std"] == 1 for m in recs["trl-ctl-zero-grad"]["metrics"])
    refused = recs["trl-ctl-one-generation"]["outcome"]
    assert refused["class"] == "error" and "at least 2 generations" in refused["evidence"], refused

    env_id = healthy["cell"]["env"]
    code, out = envmatrix("lock", env_id, "--results", str(reports / "results"), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert code == 0, out
    lock = (tmp_path / "out" / "locks" / env_id / "requirements.lock").read_text()
    assert f"trl=={TRL} \\\n    --hash=sha256:" in lock
    target = tmp_path / "locked"  # pip, not uv: it reads the pip settings that find the CPU torch
    subprocess.run([sys.executable, "-m", "venv", str(target)], check=True)
    python = str(target / "bin" / "python")
    requirements = tmp_path / "out" / "locks" / env_id / "requirements.lock"
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--require-hashes", "-r", str(requirements)], check=True, timeout=1800)
    versions = "import trl, transformers; print(trl.__version__, transformers.__version__)"
    got = subprocess.run([python, "-c", versions], capture_output=True, text=True, check=True)
    assert got.stdout.split() == [TRL, TRANSFORMERS]
