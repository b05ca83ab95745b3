"""A user's GRPO config mapped onto scenario fields: every key applied or listed, bad values named by line."""

from __future__ import annotations

from pathlib import Path

import pytest

from envmatrix.answers.grpoconfig import read
from envmatrix.errors import InputError, SpecError
from envmatrix.spec.matrix import Scenario

RECIPE = """\
# an open-r1 style recipe: model arguments and GRPOConfig in one file
model_name_or_path: Qwen/Qwen3-8B
torch_dtype: bfloat16
attn_implementation: sdpa
learning_rate: 1.0e-06
num_generations: 8
gradient_checkpointing: true
gradient_checkpointing_kwargs:
  use_reentrant: false
temperature: 0.7
top_p: 0.95
top_k: null
beta: 0.04
loss_type: dr_grpo
max_completion_length: 1024
bf16: true
use_peft: true
"""


def write(tmp: Path, text: str, name: str = "grpo.yaml") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def test_a_recipe_maps_onto_scenario_fields_and_lists_the_rest(tmp_path: Path) -> None:
    mapped = read(write(tmp_path, RECIPE))
    assert mapped.fields == {
        "attn": "sdpa",
        "lr": 1e-06,
        "num_generations": 8,
        "temperature": 0.7,
        "top_p": 0.95,
        "top_k": 0,
        "beta": 0.04,
        "lora": True,
        "dtype": "bf16",
        "grad_ckpt": "non_reentrant",
    }
    assert mapped.unmodelled == {"model_name_or_path": "Qwen/Qwen3-8B", "loss_type": "dr_grpo", "max_completion_length": 1024}
    Scenario(name="x", **mapped.fields)  # every mapped field is a scenario field


def test_json_works_too_and_unset_defaults_are_said(tmp_path: Path) -> None:
    mapped = read(write(tmp_path, '{"learning_rate": 3e-6, "gradient_checkpointing": true, "generation_kwargs": {"top_k": 1, "min_p": 0.1}}', "c.json"))
    assert mapped.fields == {"lr": 3e-6, "top_k": 1, "grad_ckpt": "reentrant"}
    assert mapped.unmodelled == {"generation_kwargs.min_p": "0.1"}  # the bounded loader keeps numbers as written
    assert any("use_reentrant not set" in n for n in mapped.notes) and any("bf16/fp16 not set" in n for n in mapped.notes)


def test_model_init_kwargs_and_vllm(tmp_path: Path) -> None:
    mapped = read(write(tmp_path, "model_init_kwargs:\n  torch_dtype: float16\n  attn_implementation: eager\n  device_map: auto\nuse_vllm: true\n"))
    assert mapped.fields == {"attn": "eager", "dtype": "fp16", "use_vllm": True, "trainer": "trl"}
    assert mapped.unmodelled == {"model_init_kwargs.device_map": "auto"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("temperature: hot\n", "grpo.yaml:1: temperature: must be a number"),
        ("num_generations: 0\n", "grpo.yaml:1: num_generations: 0 is out of range"),
        ("bf16: true\nfp16: true\n", "bf16 and fp16 are both true"),
        ("attn_implementation: paged\n", "'paged' is not an attention implementation"),
        ("gradient_checkpointing: yes-please\n", "gradient_checkpointing: must be true or false"),
        ("torch_dtype: int8\n", "'int8' is not a dtype"),
        # what TRL's GRPOConfig refuses before any step: a group of one, a batch the groups do not divide
        ("num_generations: 1\n", "grpo.yaml:1: num_generations: 1: GRPO needs at least 2 completions per prompt"),
        ("num_generations: 3\nper_device_train_batch_size: 4\n", "num_generations: 3 does not divide the generation batch of one process (4"),
        ("beta: .nan\n", "grpo.yaml:1: beta: nan is out of range"),
    ],
)
def test_bad_values_name_the_file_line_and_key(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(SpecError) as caught:
        read(write(tmp_path, text))
    assert said in str(caught.value)


def test_a_missing_file_or_a_list_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="a mapping of GRPOConfig keys"):
        read(write(tmp_path, "- 1\n- 2\n"))
