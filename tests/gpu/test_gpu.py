"""The GPU layer: the probe's families, flash-attn parity, the kernel stage, DDP over NCCL and ZeRO-3 over NCCL,
on the host backend (this interpreter). Skipped without a GPU, saying why; on a lent GPU these are the checks
that the CPU layers cannot make."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from envmatrix.host.gpus import detect_gpus
from envmatrix.run.execute import probe_command, run_logged
from envmatrix.spec.matrix import Scenario
from envmatrix.verdict.classify import classify
from envmatrix.verdict.runfacts import gather

GPUS = detect_gpus()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(GPUS.count == 0, reason=f"needs an NVIDIA GPU; this host has none{f' ({GPUS.problem})' if GPUS.problem else ''}"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch with CUDA in this interpreter"),
]


def probe(tmp_path: Path, scenario: Scenario) -> tuple[str, dict[str, object], str]:
    log = tmp_path / "probe.log"
    done = run_logged(probe_command(sys.executable, scenario, tmp_path), log, timeout=900)
    facts = gather(tmp_path, log, exit_code=done.exit_code, timed_out=done.timed_out)
    return str(classify(facts).outcome), facts.result or {}, log.read_text(errors="replace")


@pytest.mark.parametrize(("family", "dtype"), [("qwen2", "bf16"), ("llama", "bf16"), ("gemma2", "fp32"), ("qwen2_vl", "bf16")])
def test_families_train_on_the_gpu(family: str, dtype: str, tmp_path: Path) -> None:
    outcome, result, log = probe(tmp_path, Scenario(name=family, model=family, dtype=dtype, attn="eager" if family == "gemma2" else "sdpa"))
    assert outcome == "ok", log[-3000:]
    assert str((result.get("env") or {}).get("device", "")).startswith("cuda")  # type: ignore[union-attr]


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is None, reason="needs flash-attn in this interpreter")
def test_flash_attn_matches_eager(tmp_path: Path) -> None:
    outcome, result, log = probe(tmp_path, Scenario(name="fa2", dtype="bf16", attn="flash_attention_2"))
    assert outcome == "ok", log[-3000:]
    assert (result.get("parity") or {}).get("within_tolerance") is True  # type: ignore[union-attr]


def test_kernel_stage_at_full_size(tmp_path: Path) -> None:
    outcome, result, log = probe(tmp_path, Scenario(name="kernels", dtype="bf16", kernels="full", steps=1))
    assert outcome == "ok", log[-3000:]
    print(json.dumps((result.get("kernels") or {}), default=str)[:2000])


@pytest.mark.skipif(GPUS.count < 2, reason="needs 2 GPUs for DDP over NCCL")
def test_ddp_over_nccl(tmp_path: Path) -> None:
    outcome, _, log = probe(tmp_path, Scenario(name="ddp2", dtype="bf16", world_size=2))
    assert outcome == "ok", log[-3000:]


@pytest.mark.skipif(GPUS.count < 2, reason="needs 2 GPUs for ZeRO-3 and FSDP2 over NCCL")
@pytest.mark.parametrize("parallel", ["zero3", "fsdp2"])
def test_sharded_engines_over_nccl(parallel: str, tmp_path: Path) -> None:
    if parallel.startswith("zero") and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("needs deepspeed in this interpreter for ZeRO-3")
    outcome, result, log = probe(tmp_path, Scenario(name=parallel, dtype="bf16", world_size=2, parallel=parallel))
    assert outcome == "ok", log[-3000:]
    assert (result.get("engine") or {}).get("sharded") is True  # type: ignore[union-attr]
