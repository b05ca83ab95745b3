"""The tiny models the probe trains, built in code from transformers' config classes (no hub access),
and the loader for a user's local checkpoint.

A family is a config maker plus the class that trains it; a fresh model is built per attention
implementation (older transformers fix the attention class at build time) and loaded with the same
weights. A family the installed transformers lacks is a clear error naming the release that added it.
"""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import transformers

from probes import chat, fullsize, modelfolder, shrink, untrusted
from probes.record import ProbeInputError

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
#: gemma2: q/k weights scaled so that attention logits reach the softcap (50, as Gemma-2 ships):
#: an implementation that ignores the cap then fails parity (measured rel err 0.03 for sdpa on 4.51-4.57).
SOFTCAP_BITE = 20.0


class FamilyUnavailable(ProbeInputError):
    """The installed transformers lacks a family's classes (a per-cell outcome, not a probe bug)."""

    exit_code = 3


def build_tokenizer(vision: bool = False) -> Any:
    """A byte-level tokenizer built in code: 256 byte tokens + pad, bos, eos (+ the Qwen-VL vision tokens), left padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    extra = VISION_TOKENS if vision else ()
    for special in ("<pad>", "<s>", "</s>", *extra):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        additional_special_tokens=list(extra),
        model_input_names=["input_ids", "attention_mask"],
    )
    fast.padding_side = "left"
    return fast


def _ids(tokenizer: Any) -> dict[str, Any]:
    return {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}


def _text(tokenizer: Any) -> dict[str, Any]:
    """The decoder shape every tiny text family shares: 2 layers, 4 heads (2 KV), head_dim 16."""
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 128,
        "tie_word_embeddings": False,
        "use_cache": True,
        **_ids(tokenizer),
    }


def qwen2_config(tokenizer: Any) -> Any:
    return transformers.Qwen2Config(**_text(tokenizer))


def llama_config(tokenizer: Any) -> Any:
    return transformers.LlamaConfig(**_text(tokenizer), head_dim=16)


def gemma2_config(tokenizer: Any) -> Any:
    """Gemma-2's specials: attention and final logit softcapping, sliding window on alternate layers."""
    return transformers.Gemma2Config(
        **_text(tokenizer),
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=8,  # shorter than the parity texts, so the window matters
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    )


def gemma2_bite(model: Any) -> None:
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(SOFTCAP_BITE)
            layer.self_attn.k_proj.weight.mul_(SOFTCAP_BITE)


def _vl_config(config_class: str, vision: dict[str, Any]) -> Callable[[Any], Any]:
    """A Qwen2-VL-style config: tiny vision tower, mrope on the text side (sections sum to head_dim / 2)."""

    def make(tokenizer: Any) -> Any:
        cls = getattr(transformers, config_class)
        ids = {name: tokenizer.convert_tokens_to_ids(tok) for name, tok in zip(("vision_start", "vision_end", "image", "video"), VISION_TOKENS, strict=True)}
        text = {**_text(tokenizer), "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
        tokens = {
            "image_token_id": ids["image"],
            "video_token_id": ids["video"],
            "vision_start_token_id": ids["vision_start"],
            "vision_end_token_id": ids["vision_end"],
        }
        if "text_config" in getattr(cls, "sub_configs", {}):
            cfg = cls(text_config=text, vision_config=vision, **tokens, **_ids(tokenizer), tie_word_embeddings=False)
        else:  # before 4.52 the text settings sit on the top-level config
            cfg = cls(**text, vision_config=vision, **tokens)
        return cfg

    return make


VISION_PATCH = {"patch_size": 4, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_channels": 3}
qwen2_5_vl_config = _vl_config(
    "Qwen2_5_VLConfig",
    {
        **VISION_PATCH,
        "depth": 2,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_heads": 2,
        "out_hidden_size": 64,
        "window_size": 16,
        "fullatt_block_indexes": [1],
    },
)
qwen2_vl_config = _vl_config("Qwen2VLConfig", {**VISION_PATCH, "depth": 2, "embed_dim": 32, "mlp_ratio": 2, "num_heads": 2, "hidden_size": 64})


@dataclass(frozen=True)
class Family:
    """A built-in family: its config maker, the class that trains it, the release that introduced that class
    (envmatrix/families.py holds the same facts with their sources; a test keeps them equal)."""

    name: str
    config: Callable[[Any], Any]
    model_class: str
    min_transformers: str
    vision: bool = False
    prepare: Callable[[Any], None] | None = None


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen2", qwen2_config, "Qwen2ForCausalLM", "4.37.0"),
        Family("llama", llama_config, "LlamaForCausalLM", "4.28.0"),
        Family("gemma2", gemma2_config, "Gemma2ForCausalLM", "4.42.0", prepare=gemma2_bite),
        Family("qwen2_5_vl", qwen2_5_vl_config, "Qwen2_5_VLForConditionalGeneration", "4.49.0", vision=True),
        Family("qwen2_vl", qwen2_vl_config, "Qwen2VLForConditionalGeneration", "4.45.0", vision=True),
    )
}
VISION_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")


class ModelUnavailable(FamilyUnavailable):
    """The installed transformers does not know a user's model_type (a per-cell outcome in a matrix)."""


@dataclass(frozen=True)
class Tiny:
    """A user's architecture made tiny: its shrunk transformers config, each change (key → full size, tiny), notes."""

    config: Any
    changes: dict[str, tuple[Any, Any]]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class ModelSource:
    """Where the probe's model comes from: a built-in family, or a local checkpoint folder."""

    family: str | None
    path: str | None
    seed: int = 0
    vision: bool = False
    origin: str | None = None  # the family a saved checkpoint was made from
    shrink: bool = False  # `path` holds config.json and tokenizer only: build a tiny random model of its class
    trust_remote_code: bool = False
    head_dim: int | None = None  # a built-in text family with fewer, wider heads (vLLM's CPU attention needs head_dim >= 32)
    arch: fullsize.Arch | None = None  # `shrink`: the user's architecture, checked at full size
    tiny: Tiny | None = None  # `shrink`: its shrunk config, once the tokenizer is known (`shrunk`)

    @property
    def label(self) -> str:
        return self.family or self.origin or f"checkpoint:{self.path}"


def resolve(model: str, seed: int, *, shrunk: bool = False, trust_remote_code: bool = False) -> ModelSource:
    """`--model` is a family name or a local folder (with `shrunk`: config.json and tokenizer, no weights, checked
    at full size on the meta device); anything else is a clear error."""
    if model in FAMILIES and not shrunk:
        family = FAMILIES[model]
        if not hasattr(transformers, family.model_class):
            raise FamilyUnavailable(
                f"model family {model} needs transformers >= {family.min_transformers} "
                f"({family.model_class}); this environment has transformers {transformers.__version__}"
            )
        return ModelSource(family=model, path=None, seed=seed, vision=family.vision)
    folder = Path(model)
    if shrunk:
        raw = _user_config(folder, trust_remote_code)
        arch = fullsize.check(raw, folder, trusted=trust_remote_code)
        vision = raw["model_type"] in VISION_MODEL_TYPES
        return ModelSource(family=None, path=model, seed=seed, vision=vision, shrink=True, trust_remote_code=trust_remote_code, arch=arch)
    if not (folder / "config.json").is_file():
        raise ProbeInputError(f"--model {model!r} is neither a built-in family ({', '.join(FAMILIES)}) nor a local checkpoint folder with a config.json")
    raw = _bounded(lambda: untrusted.read_json(folder / "config.json", untrusted.MODEL_CONFIG))
    _bounded(lambda: modelfolder.check_tokenizer_files(folder))
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    return ModelSource(family=None, path=model, seed=seed, vision=model_type in VISION_MODEL_TYPES)


def _bounded(read: Callable[[], Any]) -> Any:
    """A bounded read of a user's file, its refusal as the probe's bad input."""
    try:
        return read()
    except untrusted.Refused as exc:
        raise ProbeInputError(str(exc)) from None


def _user_config(folder: Path, trust_remote_code: bool) -> dict[str, Any]:
    """A user's config.json, checked: readable JSON naming a model_type this transformers knows, or Python
    files beside it that the user trusts (remote code is never run without --trust-remote-code)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    raw: dict[str, Any] = _bounded(lambda: modelfolder.read_config(folder))
    model_type = raw["model_type"]
    remote = modelfolder.remote_code(raw)
    if model_type in CONFIG_MAPPING:
        return raw
    if not remote:
        raise ModelUnavailable(
            f"model_type {model_type!r} ({folder / 'config.json'}) is not known to transformers {transformers.__version__}: "
            "a newer transformers release may know it"
        )
    if not trust_remote_code:
        raise ProbeInputError(
            f"{folder / 'config.json'} asks for remote code (auto_map: {', '.join(sorted(set(remote.values())))}) and transformers "
            f"{transformers.__version__} has no {model_type!r} of its own; read those files, then pass --trust-remote-code to run them"
        )
    return raw


def load_tokenizer(source: ModelSource) -> tuple[Any, dict[str, bool]]:
    """The family's tokenizer, or the checkpoint's own as users have it (its files already within bounds), made
    fit to generate a batch; and what prepare_tokenizer found and did to it."""
    if source.path is None:
        tokenizer = build_tokenizer(vision=source.vision)
    else:  # a user's folder: a tokenizer that cannot load is their input, said in one line
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(source.path, trust_remote_code=source.trust_remote_code)
        except Exception as exc:  # any loader failure (missing file, bad JSON, remote code) is the folder's
            raise ProbeInputError(f"the tokenizer in {source.path} cannot load: {fullsize.first_line(exc, 500)}") from None
        if len(tokenizer) > untrusted.MAX_TOKENS:  # a vocabulary file that is not JSON (sentencepiece) is counted here
            raise ProbeInputError(
                f"the tokenizer in {source.path} holds {len(tokenizer):,} tokens, more than a tokenizer may ({untrusted.MAX_TOKENS:,}; "
                "the largest released vocabularies hold about 262,000)"
            )
    return tokenizer, prepare_tokenizer(tokenizer)


def prepare_tokenizer(tokenizer: Any) -> dict[str, bool]:
    """Left padding for generation, and a pad token where the tokenizer has none (eos, as TRL's GRPOTrainer
    does: most Llama/Mistral-style tokenizers ship without one). Returns what it found and did, for result.json."""
    tokenizer.padding_side = "left"
    pad_from_eos = tokenizer.pad_token is None
    if pad_from_eos:
        if tokenizer.eos_token is None:
            raise ProbeInputError(
                "the checkpoint's tokenizer has neither a pad token nor an eos token: generation cannot pad a batch; set one in its tokenizer_config.json"
            )
        tokenizer.pad_token = tokenizer.eos_token
    names = list(getattr(tokenizer, "model_input_names", ()))
    type_ids = "token_type_ids" in names
    if type_ids:  # BERT-style tokenizers return them; a causal LM's generate refuses them (TRL's GRPOTrainer too)
        tokenizer.model_input_names = [n for n in names if n != "token_type_ids"]
    return {"pad_from_eos": pad_from_eos, "chat_template": bool(getattr(tokenizer, "chat_template", None)), "token_type_ids": type_ids}


#: The prompts a tokenizer's chat template rendered in the sandbox, kept for the run (tokenizer id → its rendering).
_RENDERED: dict[int, tuple[Any, tuple[str, ...], list[str]]] = {}


def format_prompts(tokenizer: Any, prompts: list[str]) -> tuple[list[str], bool]:
    """The prompts as the model expects them: through its chat template when it has one (a user turn and the
    generation prompt, as TRL renders conversational prompts), else as they are. Returns them and whether the
    template was applied (then they already hold the special tokens). The template renders once per run, in
    the sandbox (probes/chat.py); a template it refuses is bad input naming the template."""
    if not getattr(tokenizer, "chat_template", None):
        return prompts, False
    kept = _RENDERED.get(id(tokenizer))
    if kept is None or kept[0] is not tokenizer or kept[1] != tuple(prompts):
        folder = getattr(tokenizer, "name_or_path", "") or ""
        origin = modelfolder.template_origin(Path(folder)) if folder and Path(folder).is_dir() else "the tokenizer's chat template"
        kept = (tokenizer, tuple(prompts), chat.render(tokenizer, prompts, origin))
        _RENDERED[id(tokenizer)] = kept
    return list(kept[2]), True


#: What a damaged or refused checkpoint raises while transformers loads it (a refused pickle, a truncated
#: archive or safetensors header, weights that do not fit the config); an environment's own failure (a
#: missing package, out of memory) is none of these and stays the verdict's to judge.
CHECKPOINT_ERRORS = (OSError, EOFError, pickle.UnpicklingError, ValueError, KeyError)


def _checkpoint_problem(exc: BaseException) -> bool:
    if isinstance(exc, torch.OutOfMemoryError if hasattr(torch, "OutOfMemoryError") else MemoryError):
        return False
    if type(exc).__name__ in ("SafetensorError", "HeaderTooLarge", "HeaderTooSmall", "InvalidHeaderDeserialization"):
        return True
    text = str(exc)
    if isinstance(exc, RuntimeError):
        return any(s in text for s in ("state_dict", "PytorchStreamReader", "archive", "size mismatch", "Weights only load failed"))
    if isinstance(exc, ValueError):
        return any(s in text for s in ("torch.load", "checkpoint", "safetensors", "weights"))
    return isinstance(exc, CHECKPOINT_ERRORS)


def load_checkpoint(path: str, attn: str) -> Any:
    """The checkpoint's model in fp32 with attention `attn`, of the class its architectures[0] names when
    transformers defines it for that config (never any other attribute); a checkpoint that cannot load is bad
    input in one line."""
    config = transformers.AutoConfig.from_pretrained(path)
    raw = {"model_type": config.model_type, "architectures": getattr(config, "architectures", None) or []}
    make, _, _ = fullsize.model_maker(raw, config, Path(path) / "config.json", trusted=False)
    cls: Any = make if isinstance(make, type) else transformers.AutoModelForCausalLM
    try:
        return cls.from_pretrained(path, attn_implementation=attn, torch_dtype=torch.float32)
    except Exception as exc:
        if not _checkpoint_problem(exc):
            raise
        root = exc
        while root.__cause__ is not None or root.__context__ is not None:
            root = root.__cause__ or root.__context__  # type: ignore[assignment]
        why = f" (because {type(root).__name__}: {fullsize.first_line(root, 300)})" if root is not exc else ""
        raise ProbeInputError(f"the checkpoint in {path} cannot load: {type(exc).__name__}: {fullsize.first_line(exc)}{why}") from None


def widen(cfg: Any, head_dim: int) -> None:
    """The same hidden size in fewer heads of `head_dim` each (half as many KV heads): same parameter count."""
    heads = max(1, cfg.hidden_size // head_dim)
    cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim = heads, max(1, heads // 2), head_dim


def build_model(source: ModelSource, attn: str, tokenizer: Any, state: dict[str, torch.Tensor] | None = None) -> Any:
    """A fresh fp32 model with attention `attn`, optionally loaded with `state` (the same weights every time)."""
    model: Any
    if source.shrink:
        model = tiny_model(source, attn, tokenizer)
    elif source.path:
        model = load_checkpoint(source.path, attn)
    else:
        family = FAMILIES[source.family or "qwen2"]
        cfg = family.config(tokenizer)
        if source.head_dim is not None:
            widen(cfg, source.head_dim)
        cfg._attn_implementation = attn
        for sub in ("text_config", "vision_config"):
            if isinstance(getattr(cfg, sub, None), transformers.PretrainedConfig):
                getattr(cfg, sub)._attn_implementation = attn
        torch.manual_seed(source.seed)
        model = getattr(transformers, family.model_class)(cfg)
        if family.prepare is not None:
            family.prepare(model)
    if state is not None:
        model.load_state_dict(state)
    return model


def shrunk(source: ModelSource, tokenizer: Any, prompts: list[str], texts: list[str]) -> ModelSource:
    """The source with the user's architecture made tiny, once: their config (read once, checked at full size)
    shrunk with an embedding that covers the ids the probe uses (`prompts` through the chat template, other
    `texts` as they are, the special tokens), whatever the tokenizer's length; built on the meta device first to
    bound it."""
    assert source.arch is not None and source.path is not None
    where = Path(source.path) / "config.json"
    top = highest_id(tokenizer, prompts, texts)  # tokenizing the prompts once serves both
    rows = embedding_rows(tokenizer, top, source.path)
    check_vocabulary(source.arch.raw, top, where)
    try:
        tiny, changes = shrink.shrink(source.arch.raw, rows)
    except shrink.ShrinkError as exc:  # the user's architecture, not the environment: bad input
        raise ProbeInputError(f"{where}: {exc}") from None
    notes = [source.arch.full_size_note(), *source.arch.notes]
    if (quantized := fullsize.quantization_note(source.arch.raw)) is not None:
        notes.append(quantized)
    notes += [f"{k} from the tokenizer: {v}" for k, v in shrink.retoken(tiny, token_ids(tokenizer)).items()]
    if modelfolder.remote_code(source.arch.raw) and isinstance(source.arch.make, type):
        notes.append(f"auto_map not used: transformers {transformers.__version__} has {source.arch.raw['model_type']} itself")
    config = fullsize.load_config(source.arch.config_class, tiny, where, Path(source.path))
    params, biggest = fullsize.largest_parameter(source.arch.make, config)
    if params > untrusted.MAX_SHRUNK_PARAMETERS:
        raise ProbeInputError(
            f"{where}: shrunk, it would still hold {params:,} parameters, more than {untrusted.MAX_SHRUNK_PARAMETERS:,} (the largest: {biggest}); "
            "a size the shrink keeps (such as max_position_embeddings for learned positions) is beyond what it can train on any machine"
        )
    return replace(source, tiny=Tiny(config=config, changes=changes, notes=tuple(notes)))


def highest_id(tokenizer: Any, prompts: list[str], texts: list[str]) -> tuple[int, str]:
    """The highest token id the probe can meet (its prompts through the chat template, the parity texts, the special
    tokens) and what it is (`eos_token_id`, a prompt token)."""
    rendered, _ = format_prompts(tokenizer, prompts)
    ids = {i for row in tokenizer(rendered + texts, add_special_tokens=True)["input_ids"] for i in row}
    named = {k: v for k, v in {**token_ids(tokenizer), "unk_token_id": getattr(tokenizer, "unk_token_id", None)}.items() if isinstance(v, int)}
    ids |= set(named.values()) | {i for i in getattr(tokenizer, "all_special_ids", []) if isinstance(i, int)}
    top = max(ids, default=0)
    return top, next((k for k, v in named.items() if v == top), "a prompt token")


def check_vocabulary(raw: dict[str, Any], highest: tuple[int, str], where: Path) -> None:
    """The full-size embedding holds a row for every id the tokenizer gives the run: a vocab_size at or below one is an
    index out of range at the first step (a device-side assert on a GPU), though the shrunk copy, sized from the
    tokenizer, would train."""
    text = raw["text_config"] if isinstance(raw.get("text_config"), dict) and "vocab_size" in raw["text_config"] else raw
    vocab = text.get("vocab_size")
    top, which = highest
    if isinstance(vocab, int) and not isinstance(vocab, bool) and top >= vocab:
        key = "text_config.vocab_size" if text is not raw else "vocab_size"
        raise ProbeInputError(
            f"{where}: {key}: {vocab:,} rows, but the tokenizer gives the run ids up to {top:,} ({which}); the full-size embedding "
            "has no row for them (is this the tokenizer of this model?)"
        )


def embedding_rows(tokenizer: Any, highest: tuple[int, str], folder: str) -> int:
    """Embedding rows for the shrunk model: one past the highest id the probe can meet (`highest_id`), and at least
    shrink.MIN_VOCAB of the tokenizer's tokens to sample from; bad input past MAX_EMBEDDING_ROWS."""
    top, which = highest
    if top + 1 > untrusted.MAX_EMBEDDING_ROWS:
        raise ProbeInputError(
            f"the tokenizer in {folder} gives the probe ids up to {top:,} ({which}), beyond the {untrusted.MAX_EMBEDDING_ROWS:,} embedding "
            "rows a shrunk model may hold; is this the model's own tokenizer?"
        )
    return max(top + 1, min(len(tokenizer), shrink.MIN_VOCAB), 2)


def token_ids(tokenizer: Any) -> dict[str, int]:
    """The ids a config names that must agree with the tokenizer: pad/bos/eos (the tokenizer's, as trainers use
    them) and the Qwen-VL vision placeholders where the tokenizer has them."""
    ids = {k: getattr(tokenizer, k) for k in ("pad_token_id", "bos_token_id", "eos_token_id") if isinstance(getattr(tokenizer, k, None), int)}
    for key, token in zip(("vision_start_token_id", "vision_end_token_id", "image_token_id", "video_token_id"), VISION_TOKENS, strict=True):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id:
            ids[key] = tid
    return ids


def tiny_model(source: ModelSource, attn: str, tokenizer: Any) -> Any:
    """A fresh random model of the user's class from their shrunk config (same seed every time)."""
    assert source.arch is not None and source.tiny is not None
    config = copy.deepcopy(source.tiny.config)
    config._attn_implementation = attn
    for sub in getattr(config, "sub_configs", {}) or {}:
        if isinstance(getattr(config, sub, None), transformers.PretrainedConfig):
            getattr(config, sub)._attn_implementation = attn
    torch.manual_seed(source.seed)
    return source.arch.make(config)


def preload_model_classes() -> None:
    """Import every built-in family's model module now (transformers loads them lazily on first use)."""
    for family in FAMILIES.values():
        getattr(transformers, family.model_class, None)
