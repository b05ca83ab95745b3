"""`envmatrix doctor` for real in the tests' own interpreter: the exit status follows the healthy scenarios."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import installed, write_host_matrix
from records_factory import make_record

from envmatrix.answers.doctor import nearest_vetted
from envmatrix.plan.cells import Environment
from envmatrix.records.record import BuildFacts, cell_stem, write_record

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (nox -s tests installs it)"),
]


def write_matrix(tmp: Path) -> Path:
    scenarios: dict[str, dict[str, Any]] = {
        "fp32-sdpa": {"attn": "sdpa"},
        # a healthy scenario (no expect) that cannot train: a real trapping division kills the probe
        "broken": {"fault": "sigfpe", "description": "stands in for a stack that fails"},
        "bf16-fa2": {"dtype": "bf16", "attn": "flash_attention_2"},
    }
    return write_host_matrix(tmp, scenarios)


def doctor(tmp: Path, *args: str) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "envmatrix", "doctor", "--file", str(tmp / "matrix.yaml"), "--profile", "cpu", "--reports", str(tmp / "reports"), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp, env=None)
    return done.returncode, done.stdout + done.stderr


def test_doctor_passes_a_healthy_environment_and_names_the_nearest_vetted_one(tmp_path: Path) -> None:
    write_matrix(tmp_path)
    here = {"torch": installed("torch"), "transformers": installed("transformers"), "cuda": "none", "gpu": "cpu"}
    vetted = tmp_path / "vetted"
    ctl = {"scenario": "ctl", "expect": "zero_grad"}  # a reproduced control: what vetting stands on
    for rec in (
        make_record("ok", **{**here, "transformers": "99.0.0"}, freeze=[f"torch=={installed('torch')}", "transformers==99.0.0"]),
        make_record("zero_grad", **{**here, "transformers": "99.0.0", **ctl}),
        make_record("ok", torch="0.1.0", transformers="0.1.0", cuda="none", gpu="cpu"),
        make_record("zero_grad", torch="0.1.0", transformers="0.1.0", cuda="none", gpu="cpu", **ctl),
    ):
        write_record(vetted / f"{cell_stem(rec.id)}.json", rec)
    code, out = doctor(tmp_path, "--scenario", "fp32-sdpa", "--scenario", "bf16-fa2", "--results", str(vetted))
    assert code == 0, out
    assert "✓ fp32-sdpa: ok" in out
    assert "bf16-fa2: skipped" in out  # flash-attention cannot run on this hardware: left out, with the reason
    assert "nearest vetted environment: cpu-torch" in out and "tf99.0.0" in out
    assert f"transformers: {installed('transformers')} here, 99.0.0 vetted" in out


def test_doctor_fails_when_a_healthy_scenario_does_not_train(tmp_path: Path) -> None:
    write_matrix(tmp_path)
    code, out = doctor(tmp_path, "--scenario", "broken")
    assert code == 1, out
    assert "NOT healthy" in out and "✗ broken: sigfpe" in out


def test_doctor_bad_input_exits_2(tmp_path: Path) -> None:
    write_matrix(tmp_path)
    code, out = doctor(tmp_path, "--scenario", "no-such-scenario")
    assert code == 2 and "no-such-scenario: not defined" in out and "Traceback" not in out
    code, out = doctor(tmp_path, "--results", str(tmp_path / "missing"))
    assert code == 2 and "no such results folder" in out


def test_nearest_prefers_the_same_gpu_then_fewest_differences() -> None:
    env = Environment(cuda="12.4", torch="2.6.0", transformers="4.51.3", flash_attn="none", gpu="A100", python="3.11")
    records = [
        make_record("ok", torch="2.6.0", transformers="4.57.6", freeze=["torch==2.6.0", "transformers==4.57.6"]),
        make_record("ok", torch="2.6.0", transformers="4.51.3", gpu="H20"),
        make_record("ok", torch="2.7.1", transformers="4.57.6", build=BuildFacts(freeze=("torch==2.7.1",))),
    ]
    records += [
        make_record("zero_grad", scenario="ctl", expect="zero_grad", torch=r.cell.torch, transformers=r.cell.transformers, gpu=r.cell.gpu) for r in records
    ]
    nearest = nearest_vetted(env, {"torch": "2.6.0+cu124", "transformers": "4.51.3"}, records)
    assert nearest is not None and nearest.env == "cu124-torch2.6.0-tf4.57.6-fanone-a100-py3.11"
    assert nearest.axes == (("transformers", "4.51.3", "4.57.6"),)
    assert nearest.packages == (("transformers", "4.51.3", "4.57.6"),)
