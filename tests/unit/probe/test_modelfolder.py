"""A user's model folder read within bounds: config.json's sizes, counts and epsilons typed and in range (named
with the field and the value, in a matrix file's words), the tokenizer files bounded and counted."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
from user_models import QWEN3_8B, QWEN3_30B_A3B, QWEN3_VL_8B

from probes import untrusted
from probes.modelfolder import field_problems, read_config, remote_code, template_origin, token_count
from probes.untrusted import Refused


def folder_with(tmp_path: Path, config: dict[str, Any] | str, **files: str) -> Path:
    (tmp_path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    for name, text in files.items():
        (tmp_path / name.replace("__", ".")).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "no config.json in the folder"),
        ("{not json", "not valid JSON"),
        ("[1, 2]", "a list in JSON, not an object"),
        ('{"hidden_size": 8}', "no model_type"),
    ],
)
def test_bad_folders_say_which_file_and_what_to_do(tmp_path: Path, content: str | None, said: str) -> None:
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    with pytest.raises(Refused, match=said):
        read_config(tmp_path)
    with pytest.raises(Refused, match="not a folder"):
        read_config(tmp_path / "nothing")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"hidden_size": -64}, "hidden_size: -64 is out of range [1, 131072]"),
        ({"hidden_size": 0}, "hidden_size: 0 is out of range [1, 131072]"),
        ({"num_attention_heads": 0}, "num_attention_heads: 0 is out of range [1, 1024]"),
        ({"num_key_value_heads": 5}, "num_key_value_heads: 5 does not divide num_attention_heads 32"),
        ({"num_hidden_layers": 36.5}, "num_hidden_layers: must be an integer, got 36.5"),
        ({"num_hidden_layers": 36.0}, "num_hidden_layers: must be an integer, got 36.0"),
        ({"num_hidden_layers": True}, "num_hidden_layers: must be an integer, got a boolean"),
        ({"hidden_size": "4096"}, "hidden_size: must be an integer, got '4096'"),
        ({"intermediate_size": [1, "x"]}, "intermediate_size[1]: must be an integer, got 'x'"),
        ({"hidden_size": math.nan}, "hidden_size: must be an integer, got nan"),
        ({"rms_norm_eps": math.nan}, "rms_norm_eps: nan is out of range [0, 1]"),
        ({"rms_norm_eps": math.inf}, "rms_norm_eps: inf is out of range [0, 1]"),
        ({"rms_norm_eps": -1e-6}, "rms_norm_eps: -1e-06 is out of range [0, 1]"),
        ({"rms_norm_eps": "1e-6"}, "rms_norm_eps: must be a number, got '1e-6'"),
        ({"rope_theta": -1}, "rope_theta: -1.0 is out of range"),
        ({"architectures": [5]}, "architectures[0]: must be a model class name such as LlamaForCausalLM, got 5"),
        ({"architectures": "Qwen3ForCausalLM"}, "architectures: must be a list of model class names, got str"),
        ({"architectures": ["os.system"]}, "architectures[0]: must be a model class name"),
        ({"max_position_embeddings": 1 << 40}, "max_position_embeddings: 1099511627776 is out of range"),
    ],
)
def test_a_config_that_cannot_build_at_full_size_is_refused_naming_the_field(tmp_path: Path, change: dict[str, Any], said: str) -> None:
    folder = folder_with(tmp_path, {**QWEN3_8B, **change})
    with pytest.raises(Refused) as caught:
        read_config(folder)
    assert said in str(caught.value) and str(caught.value).startswith(f"{folder / 'config.json'}: ")
    assert "\n" not in str(caught.value)


def test_every_problem_is_listed_and_sub_configs_are_named() -> None:
    vl = {**QWEN3_VL_8B, "text_config": {**QWEN3_VL_8B["text_config"], "hidden_size": -1}, "vision_config": {**QWEN3_VL_8B["vision_config"], "depth": 0.5}}
    assert sorted(field_problems({**vl, "rms_norm_eps": "tiny"})) == [
        "rms_norm_eps: must be a number, got 'tiny'",
        "text_config.hidden_size: -1 is out of range [1, 131072]",
        "vision_config.depth: must be an integer, got 0.5",
    ]


def test_released_configs_pass_and_nulls_are_left_to_the_config_class() -> None:
    for config in (QWEN3_8B, QWEN3_30B_A3B, QWEN3_VL_8B):
        assert field_problems(config) == []
    assert field_problems({**QWEN3_8B, "num_key_value_heads": None, "sliding_window": None, "head_dim": None}) == []
    assert field_problems({**QWEN3_8B, "quantization_config": {"quant_method": "fp8", "hidden_size": -1}}) == []  # not a model sub-config


def test_experts_are_bounded_by_layers_and_routing() -> None:
    assert field_problems({**QWEN3_30B_A3B, "num_experts_per_tok": 256}) == ["num_experts_per_tok: 256 is more than the 128 experts"]
    (problem,) = field_problems({**QWEN3_30B_A3B, "num_hidden_layers": 512, "num_experts": 4096})
    assert problem.startswith("num_hidden_layers: 512 layers of 4096 experts are 2,097,152 expert blocks")


def test_a_huge_deep_or_long_numbered_config_is_refused_in_one_line(tmp_path: Path) -> None:
    cases = {
        "big": ('{"model_type": "qwen3", "x": "' + "a" * (untrusted.MODEL_CONFIG.max_bytes) + '"}', "more than a model's config.json may hold (4 MiB)"),
        "deep": ('{"model_type": "qwen3", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested more than 32 levels deep"),
        "shallow-but-over": ('{"model_type": "qwen3", "x": ' + "[" * 40 + "]" * 40 + "}", "nested more than 32 levels deep"),
        "digits": ('{"model_type": "qwen3", "vocab_size": ' + "9" * 5000 + "}", "a number of 5,000 digits"),
        "not-utf8": (b'{"model_type": "q\xff"}'.decode("latin-1"), "not UTF-8 text"),
    }
    for name, (text, said) in cases.items():
        sub = tmp_path / name
        sub.mkdir()
        (sub / "config.json").write_bytes(text.encode("latin-1") if name == "not-utf8" else text.encode())
        with pytest.raises(Refused, match=said.replace("(", r"\(").replace(")", r"\)")):
            read_config(sub)


def test_files_that_are_not_regular_are_refused_without_reading(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, QWEN3_8B)
    os.mkfifo(folder / "tokenizer.json")  # reading a FIFO would block forever
    with pytest.raises(Refused, match=r"tokenizer\.json: not a regular file \(a FIFO\)"):
        read_config(folder)
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer_config.json").symlink_to("/dev/zero")
    with pytest.raises(Refused, match=r"not a regular file \(a device\)"):
        read_config(folder)


def test_tokenizer_files_are_parsed_counted_and_templates_bounded(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, QWEN3_8B, tokenizer_config__json="{nope")
    with pytest.raises(Refused, match=r"tokenizer_config\.json: not valid JSON"):
        read_config(folder)
    deep = '{"chat_template": ' + "[" * 100_000 + "]" * 100_000 + "}"
    (folder / "tokenizer_config.json").write_text(deep)
    with pytest.raises(Refused, match="nested more than 32 levels deep"):
        read_config(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}" * 100_000}))
    with pytest.raises(Refused, match="its chat_template holds 700,000 characters"):
        read_config(folder)
    (folder / "tokenizer_config.json").write_text("{}")
    (folder / "chat_template.jinja").write_text("x" * (untrusted.CHAT_TEMPLATE.max_bytes + 1))
    with pytest.raises(Refused, match=r"chat_template\.jinja: .* more than a chat template may hold"):
        read_config(folder)
    (folder / "chat_template.jinja").write_text("{{ messages }}")
    vocab = {f"t{i}": i for i in range(untrusted.MAX_TOKENS + 1)}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordLevel", "vocab": vocab}, "added_tokens": []}))
    with pytest.raises(Refused, match=r"tokenizer\.json: 524,289 tokens, more than a tokenizer may hold"):
        read_config(folder)
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordLevel", "vocab": {"a": 0}}, "added_tokens": [{"id": 1}]}))
    assert read_config(folder)["model_type"] == "qwen3"
    assert template_origin(folder) == str(folder / "chat_template.jinja")


def test_token_counts() -> None:
    assert token_count({"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": [{"id": 2, "content": "c"}, {"id": 1, "content": "b"}]}) == 3
    assert token_count({"model": {"vocab": [["a", 0.0], ["b", 0.0], ["c", 0.0], ["d", 0.0]]}, "added_tokens": [{"content": "a"}]}) == 4  # Unigram
    assert token_count({"a": 0, "b": 1}) == 2  # vocab.json
    assert token_count([1, 2]) == 0


def test_remote_code_is_read_from_auto_map() -> None:
    assert remote_code({"auto_map": {"AutoConfig": "configuration_x.XConfig"}}) == {"AutoConfig": "configuration_x.XConfig"}
    assert remote_code(QWEN3_8B) == {}
