"""A user's architecture made tiny: their `config.json` (no weights) shrunk to a few layers and a small width
while keeping what makes it that architecture, so a GRPO smoke run exercises their model's own code paths
(attention variant, softcaps, sliding window, rope scaling, tied embeddings, q/k norms, MoE routing, the
vision tower) in seconds on any machine.

Pure dict work on the JSON as the user has it (standard library only): what changed is returned with the
new config so the probe can say it; everything not named here is kept as the user wrote it.
"""

from __future__ import annotations

import copy
from typing import Any

from probes import modelfolder

#: The shrunk decoder: what the built-in tiny families use (probes/families.py `_text`).
HIDDEN, INTERMEDIATE, HEADS, HEAD_DIM = 64, 128, 4, 16
#: Layers kept: enough to hold one layer of every kind the config mixes (sliding and full attention,
#: dense and MoE), at least two, at most this many.
MAX_LAYERS = 8
#: A window shorter than the probe's prompts plus completions (about 30 tokens), so it bites, as in the gemma2 family.
WINDOW = 8
EXPERTS, EXPERTS_PER_TOKEN = 4, 2
#: Tokens the shrunk embedding keeps at least (of the tokenizer's, from id 0), beyond the ids the probe uses:
#: a group's sampled completions must be able to differ (4 specials alone would make every reward equal).
MIN_VOCAB = 4096
VISION_WIDTH, VISION_HEADS, VISION_DEPTH = 32, 2, 2
#: Keys of the text config that size the model, each → its shrunk value (only where the config sets them).
TEXT_SIZES: dict[str, int] = {
    "hidden_size": HIDDEN,
    "intermediate_size": INTERMEDIATE,
    "moe_intermediate_size": HIDDEN,
    "shared_expert_intermediate_size": HIDDEN,
    "ffn_dim": INTERMEDIATE,
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": HEAD_DIM,
}
#: Expert counts (shrunk to at most EXPERTS) and how many a token is routed to (at most EXPERTS_PER_TOKEN).
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
ROUTED = ("num_experts_per_tok", "moe_topk", "top_k_experts")
#: Keys that only cost memory or name weights that are not there.
DROPPED = ("quantization_config", "torch_dtype", "dtype", "_name_or_path", "transformers_version")
LAYER_LISTS = ("layer_types", "mlp_layer_types")
LAYER_INDEXES = ("mlp_only_layers",)


class ShrinkError(ValueError):
    """The config cannot be shrunk as it is (a message for the user: which key, what is wrong)."""


def _layer_count(text: dict[str, Any]) -> int:
    """Layers to keep: the shortest prefix holding every kind of layer the config mixes (≥ 2, ≤ MAX_LAYERS)."""
    n = int(text.get("num_hidden_layers") or 2)
    need = 2
    for key in LAYER_LISTS:
        kinds = text.get(key)
        if isinstance(kinds, list) and kinds and all(isinstance(k, str) for k in kinds):
            need = max(need, max(kinds.index(kind) for kind in set(kinds)) + 1)
    pattern = text.get("sliding_window_pattern") or text.get("sliding_window_layers_pattern")
    if isinstance(pattern, int) and pattern > 1:
        need = max(need, pattern)  # every pattern-th layer is global: keep one of them
    first_dense = text.get("first_k_dense_replace")
    if isinstance(first_dense, int) and first_dense > 0:
        need = max(need, 2)
    return max(1, min(n, need, MAX_LAYERS))


def _sections(sections: list[int], total: int) -> list[int]:
    """mrope sections rescaled to sum to `total` (half the new head dim), each at least 1."""
    old = sum(sections)
    new = [max(1, round(s * total / old)) for s in sections]
    new[-1] += total - sum(new)
    if new[-1] < 1:
        raise ShrinkError(f"rope mrope_section {sections} cannot be rescaled to head_dim {2 * total}")
    return new


def _shrink_text(text: dict[str, Any], changes: dict[str, tuple[Any, Any]], prefix: str) -> None:
    """Shrink a decoder's config in place, noting each change as prefix+key → (old, new)."""

    def put(key: str, value: Any) -> None:
        if text.get(key) != value:
            changes[prefix + key] = (copy.deepcopy(text.get(key)), value)
            text[key] = value

    heads = text.get("num_attention_heads")
    kv = text.get("num_key_value_heads")
    old_head_dim = text.get("head_dim") or (
        text["hidden_size"] // heads if isinstance(text.get("hidden_size"), int) and isinstance(heads, int) and heads else None
    )
    layers = _layer_count(text)
    if "num_hidden_layers" in text:
        put("num_hidden_layers", layers)
    for key in LAYER_LISTS:
        if isinstance(text.get(key), list):
            put(key, text[key][:layers])
    for key in LAYER_INDEXES:
        if isinstance(text.get(key), list):
            put(key, [i for i in text[key] if isinstance(i, int) and i < layers])
    if isinstance(text.get("first_k_dense_replace"), int) and text["first_k_dense_replace"] > 0:
        put("first_k_dense_replace", 1)
    if isinstance(text.get("max_window_layers"), int) and text.get("use_sliding_window"):
        put("max_window_layers", min(text["max_window_layers"], layers // 2))
    for key, value in TEXT_SIZES.items():
        if isinstance(text.get(key), int):
            put(key, value)
    if isinstance(heads, int):
        put("num_attention_heads", HEADS)
        if isinstance(kv, int):  # keep the attention variant: MHA stays MHA, MQA stays MQA, GQA stays grouped
            put("num_key_value_heads", HEADS if kv == heads else 1 if kv == 1 else 2)
    if isinstance(text.get("head_dim"), int):
        put("head_dim", HEAD_DIM)
    if isinstance(text.get("sliding_window"), int) and text["sliding_window"] > WINDOW:
        put("sliding_window", WINDOW)
    for key in EXPERT_COUNTS:
        if isinstance(text.get(key), int) and text[key] > EXPERTS:
            put(key, EXPERTS)
    for key in ROUTED:
        if isinstance(text.get(key), int) and text[key] > EXPERTS_PER_TOKEN:
            put(key, EXPERTS_PER_TOKEN)
    if isinstance(text.get("n_shared_experts"), int) and text["n_shared_experts"] > 1:
        put("n_shared_experts", 1)
    if isinstance(text.get("n_group"), int) and text["n_group"] > 1:  # grouped routing: experts must split into groups
        put("n_group", 1)
        if isinstance(text.get("topk_group"), int):
            put("topk_group", 1)
    new_head_dim = HEAD_DIM if isinstance(heads, int) else None
    for rope_key in ("rope_scaling", "rope_parameters"):
        rope = text.get(rope_key)
        if isinstance(rope, dict) and isinstance(rope.get("mrope_section"), list) and new_head_dim and old_head_dim:
            put(rope_key, {**rope, "mrope_section": _sections([int(s) for s in rope["mrope_section"]], new_head_dim // 2)})


def _shrink_vision(vision: dict[str, Any], old_text_hidden: Any, changes: dict[str, tuple[Any, Any]], prefix: str) -> None:
    """A vision tower of two narrow blocks; sizes that equal the language model's width follow it (the merger's output)."""

    def put(key: str, value: Any) -> None:
        if vision.get(key) != value:
            changes[prefix + key] = (copy.deepcopy(vision.get(key)), value)
            vision[key] = value

    tied = {k for k, v in vision.items() if isinstance(v, int) and v == old_text_hidden and k.endswith(("hidden_size", "_dim", "out_hidden_size"))}
    for key in tied:
        put(key, HIDDEN)
    for key in ("depth", "num_hidden_layers"):
        if isinstance(vision.get(key), int) and key not in tied:
            put(key, VISION_DEPTH)
    for key in ("embed_dim", "hidden_size"):
        if isinstance(vision.get(key), int) and key not in tied:
            put(key, VISION_WIDTH)
    for key in ("num_heads", "num_attention_heads"):
        if isinstance(vision.get(key), int):
            put(key, VISION_HEADS)
    if isinstance(vision.get("intermediate_size"), int) and "intermediate_size" not in tied:
        put("intermediate_size", 2 * VISION_WIDTH)
    for key in ("fullatt_block_indexes", "deepstack_visual_indexes"):
        if isinstance(vision.get(key), list):
            put(key, [i for i in vision[key] if isinstance(i, int) and i < VISION_DEPTH] or [VISION_DEPTH - 1])


def shrink(config: dict[str, Any], vocab: int) -> tuple[dict[str, Any], dict[str, tuple[Any, Any]]]:
    """The config made tiny, and each change as key → (full-size value, tiny value).

    `vocab` is the tokenizer's length: the embedding is cut to the tokens that exist (a real vocab pads past
    them; a random model would sample those ids and decode them to nothing)."""
    tiny = copy.deepcopy(config)
    changes: dict[str, tuple[Any, Any]] = {}
    for key in DROPPED:
        if key in tiny:
            changes[key] = (tiny.pop(key), None)
    text_key = "text_config" if isinstance(tiny.get("text_config"), dict) and "num_hidden_layers" in tiny["text_config"] else None
    text = tiny[text_key] if text_key else tiny
    prefix = f"{text_key}." if text_key else ""
    for alias, name in modelfolder.ALIASES.items():  # GPT-2's n_layer, MPT's d_model: the config class maps the usual name onto them
        if alias in text and name not in text:
            text[name] = text.pop(alias)
    if "num_hidden_layers" not in text:
        raise ShrinkError("config.json has no num_hidden_layers (top level or text_config): not a decoder model preflight can shrink")
    old_hidden = text.get("hidden_size")
    _shrink_text(text, changes, prefix)
    if isinstance(text.get("vocab_size"), int) and text["vocab_size"] != vocab:
        changes[prefix + "vocab_size"] = (text["vocab_size"], vocab)
        text["vocab_size"] = vocab
    if isinstance(tiny.get("vision_config"), dict):
        _shrink_vision(tiny["vision_config"], old_hidden, changes, "vision_config.")
    return tiny, changes


def shown(changes: dict[str, tuple[Any, Any]]) -> dict[str, list[Any]]:
    """The changes as JSON for result.json: key → [full size, tiny] (long lists cut to their length)."""

    def brief(v: Any) -> Any:
        return f"{len(v)} entries" if isinstance(v, list) and len(v) > 8 else v

    return {k: [brief(a), brief(b)] for k, (a, b) in sorted(changes.items())}


def retoken(config: dict[str, Any], ids: dict[str, int]) -> dict[str, str]:
    """Set the config's token ids (top level and text_config) to the tokenizer's where they differ, in place;
    returns what changed as key → 'old → new'. The tokenizer is the one the user trains with."""
    changed: dict[str, str] = {}
    for prefix, part in (("", config), ("text_config.", config.get("text_config"))):
        if not isinstance(part, dict):
            continue
        for key, value in ids.items():
            if key in part and part[key] != value:
                changed[prefix + key] = f"{part[key]} → {value}"
                part[key] = value
    return changed
