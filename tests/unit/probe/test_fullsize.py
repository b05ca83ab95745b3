"""The user's architecture at full size on the meta device, before shrinking: only the class transformers
defines for the config is built, and what only a full-size build finds is bad input naming the file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import transformers
from user_models import LLAMA3_70B, QWEN3_8B, QWEN3_VL_8B

from probes import fullsize
from probes.record import ProbeInputError


def check(tmp_path: Path, config: dict[str, Any]) -> fullsize.Arch:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return fullsize.check(config, tmp_path, trusted=False)


def test_a_70b_config_builds_at_full_size_without_memory(tmp_path: Path) -> None:
    arch = check(tmp_path, LLAMA3_70B)
    assert arch.name == "LlamaForCausalLM" and arch.params == 70_553_706_496
    assert "full size: LlamaForCausalLM, 70,553,706,496 parameters, built on the meta device" in arch.full_size_note()


def test_a_vlm_builds_its_own_class(tmp_path: Path) -> None:
    if not hasattr(transformers, "Qwen3VLForConditionalGeneration"):
        pytest.skip(f"transformers {transformers.__version__} has no Qwen3-VL")
    assert check(tmp_path, QWEN3_VL_8B).name == "Qwen3VLForConditionalGeneration"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"hidden_act": "no_such_act"}, "cannot build Qwen3ForCausalLM at full size from it: KeyError: 'no_such_act' (the value of hidden_act: 'no_such_act')"),
        ({"layer_types": ["full_attention"] * 3}, "refuses it: `num_hidden_layers` (36) must be equal to the number of"),
        ({"rope_scaling": {"rope_type": "yarn"}}, "refuses it:"),
        ({"architectures": ["pipeline"]}, "architectures[0]: 'pipeline' is not a model class transformers"),
        ({"architectures": ["MistralForCausalLM"]}, "it defines Qwen3ForCausalLM"),
        ({"architectures": ["Qwen2TokenizerFast"]}, "'Qwen2TokenizerFast' is not a model class"),
        ({"architectures": ["__class__"]}, "'__class__' is not a model class"),
    ],
)
def test_what_only_the_full_size_build_or_the_class_check_finds_is_bad_input(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    with pytest.raises(ProbeInputError) as caught:
        check(tmp_path, {**QWEN3_8B, **change})
    assert said in str(caught.value) and str(caught.value).startswith(str(tmp_path / "config.json"))


def test_nothing_but_a_model_class_is_ever_called(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[Any] = []
    monkeypatch.setattr(transformers, "pipeline", lambda *a, **k: called.append(a), raising=False)
    with pytest.raises(ProbeInputError):
        check(tmp_path, {**QWEN3_8B, "architectures": ["pipeline"]})
    assert called == []


def test_a_class_that_cannot_generate_or_none_gives_way_to_the_generating_class(tmp_path: Path) -> None:
    base = check(tmp_path, {**QWEN3_8B, "architectures": ["Qwen3Model"]})
    assert base.name == "Qwen3ForCausalLM" and "Qwen3Model cannot generate" in base.notes[0]
    none = check(tmp_path, {**QWEN3_8B, "architectures": []})
    assert none.name == "Qwen3ForCausalLM" and "no architectures" in none.notes[0]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"head_dim": 3}, "head_dim: head_dim 3 is odd"),  # builds on meta; its first forward fails in the rotary embedding
        ({"head_dim": None, "hidden_size": 8190, "num_attention_heads": 64}, "head_dim: head_dim 127 is odd"),
        ({"rope_scaling": "linear"}, "refuses it"),  # the config class's own AttributeError on a user's value is bad input
        ({"torch_dtype": "float128"}, "refuses it"),
    ],
)
def test_what_the_meta_build_cannot_show_is_bad_input(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    with pytest.raises(ProbeInputError, match=re.escape(said)):
        check(tmp_path, {**LLAMA3_70B, **change})


def test_a_refused_generation_config_is_bad_input_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps({"max_new_tokens": -5}))
    with pytest.raises(ProbeInputError, match=r"generation_config\.json: transformers .* cannot load it"):
        check(tmp_path, QWEN3_8B)


def test_a_quantized_config_says_the_tiny_model_trains_unquantized() -> None:
    note = fullsize.quantization_note({**QWEN3_8B, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True}})
    assert note is not None and "the tiny model trains unquantized; its load needs bitsandbytes" in note
    assert fullsize.quantization_note(QWEN3_8B) is None


def test_an_encoder_decoder_is_no_model_grpo_trains(tmp_path: Path) -> None:
    t5 = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 64, "d_ff": 128, "num_layers": 2, "num_heads": 4, "vocab_size": 512}
    with pytest.raises(ProbeInputError, match="'t5' is an encoder-decoder model"):
        check(tmp_path, t5)
