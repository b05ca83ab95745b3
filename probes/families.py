"""The tiny models the probe trains, built in code (no hub access), and a local checkpoint loader.

A family is a function from (tokenizer, attention implementation) to a config; the model class comes
from the config. A fresh model is built per attention implementation because older transformers fix
the attention class at build time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import transformers


def build_tokenizer() -> Any:
    """A byte-level tokenizer built in code: 256 byte tokens + pad, bos, eos (259 in all), left padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<pad>", "<s>", "</s>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", model_input_names=["input_ids", "attention_mask"]
    )
    fast.padding_side = "left"
    return fast


def _special_ids(tokenizer: Any) -> dict[str, Any]:
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}


def qwen2_config(tokenizer: Any) -> Any:
    """A Qwen2-style causal LM small enough to train on 2 CPU cores in a fraction of a second per step."""
    return transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        use_cache=True,
        **_special_ids(tokenizer),
    )


@dataclass(frozen=True)
class Family:
    """A built-in model family: its config maker and the causal-LM class that trains it."""

    name: str
    config: Callable[[Any], Any]
    model_class: str


FAMILIES: dict[str, Family] = {
    "qwen2": Family("qwen2", qwen2_config, "Qwen2ForCausalLM"),
}


@dataclass(frozen=True)
class ModelSource:
    """Where the probe's model comes from: a built-in family, or a local checkpoint folder."""

    family: str | None
    path: str | None
    seed: int = 0

    @property
    def label(self) -> str:
        return self.family or f"checkpoint:{self.path}"


def load_tokenizer(source: ModelSource) -> Any:
    tokenizer = transformers.AutoTokenizer.from_pretrained(source.path) if source.path else build_tokenizer()
    tokenizer.padding_side = "left"
    return tokenizer


def build_model(source: ModelSource, attn: str, tokenizer: Any, state: dict[str, torch.Tensor] | None = None) -> Any:
    """A fresh fp32 model with attention `attn`, optionally loaded with `state` (the same weights every time)."""
    model: Any
    if source.path:
        model = transformers.AutoModelForCausalLM.from_pretrained(source.path, attn_implementation=attn, torch_dtype=torch.float32)
    else:
        family = FAMILIES[source.family or "qwen2"]
        cfg = family.config(tokenizer)
        cfg._attn_implementation = attn
        torch.manual_seed(source.seed)
        model = getattr(transformers, family.model_class)(cfg)
    if state is not None:
        model.load_state_dict(state)
    return model


def preload_model_classes() -> None:
    """Import every built-in family's model module now (transformers loads them lazily on first use)."""
    for family in FAMILIES.values():
        getattr(transformers, family.model_class)
