"""The built-in loop on each engine for real: 2 ranks over gloo, the probe trains (grad_norm > 0, every
trainable parameter got a gradient and changed, read gathered) and says the engine engaged."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from envmatrix.run.execute import probe_command, run_logged
from envmatrix.spec.matrix import Scenario
from envmatrix.verdict.classify import classify
from envmatrix.verdict.runfacts import gather

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
        reason="needs torch and transformers (nox -s tests installs them)",
    ),
]
NO_DEEPSPEED = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="zero2/zero3 need the deepspeed package in the tests' interpreter")


@pytest.mark.parametrize("parallel", ["fsdp2", pytest.param("zero2", marks=NO_DEEPSPEED), pytest.param("zero3", marks=NO_DEEPSPEED)])
def test_engine_trains_on_two_ranks(parallel: str, tmp_path: Path) -> None:
    scenario = Scenario(name=f"qwen2-{parallel}", world_size=2, parallel=parallel, steps=2)
    log = tmp_path / "probe.log"
    done = run_logged(probe_command(sys.executable, scenario, tmp_path), log, timeout=600)  # the probe sets DS_ACCELERATOR=cpu itself
    facts = gather(tmp_path, log, exit_code=done.exit_code, timed_out=done.timed_out)
    result = facts.result or {}
    assert classify(facts).outcome == "ok", log.read_text(errors="replace")[-3000:]
    assert result["options"]["parallel"] == parallel and result["steps_completed"] == 2
    assert all(m["grad_norm"] > 0 for m in facts.metrics)
    assert result["params"]["all_got_grad"] and result["params"]["all_changed"] and result["params"]["trainable"] > 0
    engine = result["engine"]
    assert engine["parallel"] == parallel and engine["sharded"] is True
    if parallel == "fsdp2":
        assert engine["dtensor_params"] == engine["params"] > 0
    else:
        assert engine["zero_stage"] == int(parallel[-1])
        assert engine["partitioned_params"] == (engine["params"] if parallel == "zero3" else 0)


NO_TRL = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trainer: trl needs the trl package in the tests' interpreter")


@NO_TRL
@NO_DEEPSPEED
def test_trl_trains_under_zero3_through_accelerates_plugin(tmp_path: Path) -> None:
    """TRL's GRPOTrainer under accelerate's DeepSpeed plugin: accelerate says DEEPSPEED, every parameter is
    partitioned, and the gathered values all changed."""
    scenario = Scenario(name="trl-zero3", trainer="trl", world_size=2, parallel="zero3", steps=2)
    log = tmp_path / "probe.log"
    done = run_logged(probe_command(sys.executable, scenario, tmp_path), log, timeout=900)
    facts = gather(tmp_path, log, exit_code=done.exit_code, timed_out=done.timed_out)
    result = facts.result or {}
    assert classify(facts).outcome == "ok", log.read_text(errors="replace")[-3000:]
    engine = result["engine"]
    assert engine["distributed_type"] == "DEEPSPEED" and engine["zero_stage"] == 3 and engine["sharded"] is True
    assert engine["partitioned_params"] == engine["params"] > 0
    assert result["params"]["all_changed"] and result["params"]["all_got_grad"]
