"""The shrink keeps what makes an architecture and cuts its size: pure dict work, checked key by key."""

from __future__ import annotations

import json
from typing import Any

import pytest
from user_models import GEMMA3_1B, MISTRAL_7B, QWEN3_8B, QWEN3_30B_A3B, QWEN3_VL_8B

from probes.shrink import HEAD_DIM, HIDDEN, MAX_LAYERS, WINDOW, ShrinkError, retoken, shown, shrink


def test_a_dense_gqa_model_keeps_its_grouping_norms_and_untied_head() -> None:
    tiny, changes = shrink(QWEN3_8B, vocab=300)
    assert (tiny["hidden_size"], tiny["head_dim"], tiny["num_attention_heads"], tiny["num_key_value_heads"]) == (HIDDEN, HEAD_DIM, 4, 2)
    assert tiny["num_hidden_layers"] == 2 and tiny["vocab_size"] == 300
    assert tiny["tie_word_embeddings"] is False and tiny["rope_theta"] == 1000000 and tiny["architectures"] == ["Qwen3ForCausalLM"]
    assert changes["num_hidden_layers"] == (36, 2) and changes["torch_dtype"] == ("bfloat16", None)
    assert "torch_dtype" not in tiny
    assert QWEN3_8B["num_hidden_layers"] == 36  # the user's config is not touched


@pytest.mark.parametrize(("heads", "kv", "want"), [(32, 32, 4), (32, 1, 1), (32, 8, 2), (64, 4, 2)])
def test_the_attention_variant_survives(heads: int, kv: int, want: int) -> None:
    tiny, _ = shrink({**QWEN3_8B, "num_attention_heads": heads, "num_key_value_heads": kv}, vocab=300)
    assert tiny["num_key_value_heads"] == want


def test_sliding_window_layers_keep_a_global_layer_and_a_window_that_bites() -> None:
    tiny, _ = shrink(GEMMA3_1B, vocab=300)
    assert tiny["num_hidden_layers"] == 6  # pattern 6: five sliding layers, then the first global one
    assert tiny["sliding_window"] == WINDOW and tiny["num_key_value_heads"] == 1
    explicit = {**GEMMA3_1B, "layer_types": ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"] * 20}
    tiny, _ = shrink(explicit, vocab=300)
    assert tiny["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"] and tiny["num_hidden_layers"] == 6
    far = {**explicit, "layer_types": ["sliding_attention"] * 20 + ["full_attention"] * 6}
    assert shrink(far, vocab=300)[0]["num_hidden_layers"] == MAX_LAYERS


def test_mistral_keeps_its_window_and_untied_vocab() -> None:
    tiny, _ = shrink(MISTRAL_7B, vocab=259)
    assert tiny["sliding_window"] == WINDOW and tiny["vocab_size"] == 259 and "head_dim" not in tiny


def test_moe_routing_keeps_experts_and_top_k_with_fewer_of_them() -> None:
    tiny, _ = shrink({**QWEN3_30B_A3B, "mlp_only_layers": [0, 30]}, vocab=300)
    assert (tiny["num_experts"], tiny["num_experts_per_tok"], tiny["moe_intermediate_size"]) == (4, 2, HIDDEN)
    assert tiny["mlp_only_layers"] == [0] and tiny["norm_topk_prob"] is True
    deepseek = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "n_routed_experts": 256}
    tiny, _ = shrink({**deepseek, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "first_k_dense_replace": 3, "kv_lora_rank": 512}, vocab=300)
    assert (tiny["n_routed_experts"], tiny["n_group"], tiny["topk_group"], tiny["first_k_dense_replace"], tiny["kv_lora_rank"]) == (4, 1, 1, 1, 32)


def test_a_vlm_shrinks_its_tower_and_its_rotary_sections_fit_the_new_head() -> None:
    tiny, changes = shrink(QWEN3_VL_8B, vocab=263)
    text, vision = tiny["text_config"], tiny["vision_config"]
    assert sum(text["rope_scaling"]["mrope_section"]) == HEAD_DIM // 2 and text["rope_scaling"]["mrope_interleaved"] is True
    assert vision["out_hidden_size"] == HIDDEN == text["hidden_size"]  # the merger feeds the language model
    assert (vision["depth"], vision["hidden_size"], vision["num_heads"], vision["deepstack_visual_indexes"]) == (2, 32, 2, [1])
    assert vision["patch_size"] == 16 and "text_config.num_hidden_layers" in changes
    qwen2_vl = {"model_type": "qwen2_vl", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4}
    tiny, _ = shrink({**qwen2_vl, "vision_config": {"depth": 32, "embed_dim": 1280, "hidden_size": 3584, "num_heads": 16}}, vocab=300)
    assert tiny["vision_config"]["hidden_size"] == HIDDEN and tiny["vision_config"]["embed_dim"] == 32  # tied to the LM / the tower's own


def test_quantized_checkpoints_lose_the_quantization_only() -> None:
    tiny, changes = shrink({**QWEN3_8B, "quantization_config": {"quant_method": "fp8"}}, vocab=300)
    assert "quantization_config" not in tiny and changes["quantization_config"][1] is None


def test_retoken_takes_the_tokenizers_ids() -> None:
    config: dict[str, Any] = json.loads(json.dumps(QWEN3_VL_8B))
    said = retoken(config, {"eos_token_id": 5, "image_token_id": 7})
    assert config["image_token_id"] == 7 and config["text_config"]["eos_token_id"] == 5
    assert said == {"image_token_id": "151655 → 7", "text_config.eos_token_id": "151645 → 5"}


def test_shown_cuts_long_lists() -> None:
    assert shown({"layer_types": (["a"] * 26, ["a"] * 2)}) == {"layer_types": ["26 entries", ["a", "a"]]}


def test_a_config_without_layers_cannot_be_shrunk() -> None:
    with pytest.raises(ShrinkError, match="num_hidden_layers"):
        shrink({"model_type": "bert_like"}, vocab=10)


def test_sizes_under_another_name_shrink_too() -> None:
    """GPT-2 names its sizes n_layer, n_embd, n_head, n_positions (its config class maps the usual names onto them)."""
    gpt2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257}
    tiny, changes = shrink(gpt2, 4096)
    assert "n_layer" not in tiny and tiny["num_hidden_layers"] < 12 and changes["num_hidden_layers"][0] == 12
