"""The TRL trainer path's configuration, without TRL: what the probe would hand GRPOConfig (vLLM included)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from envmatrix.errors import SpecError
from envmatrix.spec.matrix import Scenario, load

PROBES = Path(__file__).resolve().parents[3] / "probes"


def trl_trainer() -> Any:
    sys.path.insert(0, str(PROBES))
    try:
        return importlib.import_module("trl_trainer")
    finally:
        sys.path.remove(str(PROBES))


def options(**overrides: Any) -> SimpleNamespace:
    """The probe's parsed options for a scenario, from the scenario's own defaults (one owner)."""
    fields = {k.replace("-", "_"): v for k, v in vars(Scenario(name="x", trainer="trl")).items()}
    return SimpleNamespace(**{**fields, **overrides})


def kwargs(opts: SimpleNamespace, accepted: set[str] | None = None, world: int = 1, device: str = "cpu") -> dict[str, Any]:
    return dict(trl_trainer().grpo_config_kwargs(opts, out_dir=Path("/o"), n_prompts=4, world=world, max_new_tokens=16, device=device, accepted=accepted))


def test_module_imports_without_trl() -> None:
    heavy = "{'trl', 'datasets', 'accelerate', 'torch'}"
    code = f"import sys; sys.path.insert(0, {str(PROBES)!r}); import trl_trainer; print(sorted({heavy} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.strip() == "[]"  # trl (and torch) are imported only when a trl cell runs
    assert callable(trl_trainer().run_trl)


def test_scenario_settings_reach_grpo_config() -> None:
    got = kwargs(options(num_generations=2, temperature=0.01, top_p=0.001, grad_ckpt="reentrant", dtype="bf16", beta=0.04, steps=3))
    assert got["num_generations"] == 2 and got["temperature"] == 0.01 and got["top_p"] == 0.001 and got["beta"] == 0.04
    assert got["gradient_checkpointing"] is True and got["gradient_checkpointing_kwargs"] == {"use_reentrant": True}
    assert got["bf16"] is True and got["fp16"] is False and got["max_steps"] == 3
    assert got["per_device_train_batch_size"] == 8 and got["max_completion_length"] == 16 and got["use_cpu"] is True
    assert got["report_to"] == "none" and got["logging_steps"] == 1 and got["save_strategy"] == "no"
    assert "use_vllm" not in got and got["ddp_find_unused_parameters"] is None


def test_ddp_splits_the_batch_and_passes_find_unused() -> None:
    got = kwargs(options(find_unused_parameters=True), world=2)
    assert got["per_device_train_batch_size"] == 8 and got["ddp_find_unused_parameters"] is True


def test_vllm_colocate_arguments() -> None:
    got = kwargs(options(use_vllm=True), device="cuda")
    assert got["use_vllm"] is True and got["vllm_mode"] == "colocate" and got["vllm_gpu_memory_utilization"] == 0.3
    assert got["use_cpu"] is False
    old = kwargs(options(use_vllm=True), accepted={"use_vllm", "num_generations"}, device="cuda")
    assert old == {"use_vllm": True, "num_generations": 4}  # a release without vllm_mode: left out, never a TypeError


def test_unsupported_options_are_named() -> None:
    assert trl_trainer().unsupported(options(fault="sigfpe", input_grad_hook=False)) == ["fault='sigfpe'", "input_grad_hook=False"]
    assert trl_trainer().unsupported(options()) == []


def test_spec_refuses_options_trl_does_not_apply(matrix: Any) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["scenarios"]["t"] = {"trainer": "trl", "fault": "sigfpe", "input_grad_hook": False}

    with pytest.raises(SpecError) as info:
        load(matrix(edit))
    assert "scenarios.t.fault: trainer: trl does not apply fault: sigfpe" in str(info.value)
    assert "scenarios.t.input_grad_hook: trainer: trl does not apply input_grad_hook: false" in str(info.value)


def test_vllm_gets_the_built_in_model_by_path(tmp_path: Path) -> None:
    saved: list[str] = []
    model = SimpleNamespace(config=SimpleNamespace(_name_or_path=""), save_pretrained=saved.append)
    tokenizer = SimpleNamespace(save_pretrained=saved.append)
    trl_trainer().save_for_vllm(model, tokenizer, tmp_path / "m")
    assert saved == [str(tmp_path / "m")] * 2 and model.config._name_or_path == str(tmp_path / "m")
