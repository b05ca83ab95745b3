"""Users' models as they download them for a preflight: a full-size `config.json` (the values their hub
cards ship) and a tokenizer with that model's special tokens and chat template, no weights. Built in code so
the tests need no hub; each is an architecture that is not one of the probe's built-in families."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

QWEN_CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
GEMMA_CHAT = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_VL_SPECIALS = [*QWEN_SPECIALS, "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]

QWEN3_8B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "model_type": "qwen3",
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
GEMMA3_1B: dict[str, Any] = {
    "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 262144,
}
QWEN3_30B_A3B: dict[str, Any] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 48,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
MISTRAL_7B: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 32000,
}
#: Llama 3 70B's config.json as Meta ships it (the full-size build must stay quick for a 70B-class model).
LLAMA3_70B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": 28672,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}
QWEN3_VL_8B: dict[str, Any] = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": 151655,
    "model_type": "qwen3_vl",
    "text_config": {
        "attention_bias": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "max_position_embeddings": 262144,
        "model_type": "qwen3_vl_text",
        "num_attention_heads": 32,
        "num_hidden_layers": 36,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
        "rope_theta": 5000000,
        "tie_word_embeddings": False,
        "use_cache": True,
        "vocab_size": 151936,
    },
    "tie_word_embeddings": False,
    "video_token_id": 151656,
    "vision_config": {
        "deepstack_visual_indexes": [8, 16, 24],
        "depth": 27,
        "hidden_act": "gelu_pytorch_tanh",
        "hidden_size": 1152,
        "in_channels": 3,
        "initializer_range": 0.02,
        "intermediate_size": 4304,
        "model_type": "qwen3_vl",
        "num_heads": 16,
        "num_position_embeddings": 2304,
        "out_hidden_size": 4096,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
    "vision_end_token_id": 151653,
    "vision_start_token_id": 151652,
}


def save_tokenizer(folder: Path, specials: list[str], *, pad: str | None, bos: str | None, eos: str, chat_template: str | None = None) -> None:
    """A byte-level BPE tokenizer with the model's special tokens, saved as users download one (tokenizer.json)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for token in specials:
        vocab.setdefault(token, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    named = {"pad_token": pad, "bos_token": bos, "eos_token": eos}
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        **{k: v for k, v in named.items() if v is not None},
        additional_special_tokens=[t for t in specials if t not in named.values()],
    )
    if chat_template:
        fast.chat_template = chat_template
    fast.save_pretrained(folder)


def write_model(folder: Path, config: dict[str, Any], tokenizer: dict[str, Any]) -> Path:
    """A model folder: config.json and the tokenizer files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    save_tokenizer(folder, **tokenizer)
    return folder


#: name → (config, tokenizer settings): a dense GQA model with q/k norms, sliding-window layers with MQA,
#: an MoE, a Llama-style tokenizer without a pad token, and a VLM.
USER_MODELS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "qwen3-8b": (QWEN3_8B, {"specials": QWEN_SPECIALS, "pad": "<|endoftext|>", "bos": None, "eos": "<|im_end|>", "chat_template": QWEN_CHAT}),
    "gemma3-1b": (
        GEMMA3_1B,
        {
            "specials": ["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
            "pad": "<pad>",
            "bos": "<bos>",
            "eos": "<eos>",
            "chat_template": GEMMA_CHAT,
        },
    ),
    "qwen3-30b-a3b": (QWEN3_30B_A3B, {"specials": QWEN_SPECIALS, "pad": "<|endoftext|>", "bos": None, "eos": "<|im_end|>", "chat_template": QWEN_CHAT}),
    "mistral-7b": (MISTRAL_7B, {"specials": ["<unk>", "<s>", "</s>"], "pad": None, "bos": "<s>", "eos": "</s>"}),
    "qwen3-vl-8b": (QWEN3_VL_8B, {"specials": QWEN_VL_SPECIALS, "pad": "<|endoftext|>", "bos": None, "eos": "<|im_end|>", "chat_template": QWEN_CHAT}),
    "llama3-70b": (
        LLAMA3_70B,
        {"specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], "pad": None, "bos": "<|begin_of_text|>", "eos": "<|end_of_text|>"},
    ),
}


def user_model(root: Path, name: str) -> Path:
    config, tokenizer = USER_MODELS[name]
    return write_model(root / name, config, tokenizer)


#: A model whose architecture lives in Python files beside its config (auto_map): Qwen3 under another name,
#: and a marker file written when that code runs.
REMOTE_CONFIG = """import pathlib

from transformers import Qwen3Config

pathlib.Path(MARKER).write_text("remote code ran")  # transformers runs a copy of this file from its modules cache


class AcmeConfig(Qwen3Config):
    model_type = "acme_lm"
"""
REMOTE_MODEL = """from transformers import Qwen3ForCausalLM

from .configuration_acme import AcmeConfig


class AcmeForCausalLM(Qwen3ForCausalLM):
    config_class = AcmeConfig
"""


def remote_model(root: Path) -> Path:
    auto = {"AutoConfig": "configuration_acme.AcmeConfig", "AutoModelForCausalLM": "modeling_acme.AcmeForCausalLM"}
    folder = write_model(
        root / "acme", {**QWEN3_8B, "model_type": "acme_lm", "architectures": ["AcmeForCausalLM"], "auto_map": auto}, USER_MODELS["qwen3-8b"][1]
    )
    (folder / "configuration_acme.py").write_text(REMOTE_CONFIG.replace("MARKER", repr(str(folder / "RAN"))))
    (folder / "modeling_acme.py").write_text(REMOTE_MODEL)
    return folder
