"""A user's model folder read once and within bounds: its config.json as a JSON object whose sizes, counts and
epsilons are typed and in range, as transformers will need them at full size (said before anything shrinks
them: a shrink that overwrites `hidden_size: -64` would otherwise train happily), and the tokenizer files
beside it (size, depth, digits, how many tokens, the chat template's length).

Standard library only: `envmatrix preflight` calls it on the host before anything runs, the probe again in
the environment under test (which then builds the full-size model on the meta device, probes/fullsize.py).
Bounds and wording come from probes/untrusted.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probes import untrusted
from probes.untrusted import Refused

#: Vocabulary files: the JSON ones are counted (tokens), the others bounded by size. Which files a tokenizer reads
#: is its class's to say (and the class is the user's tokenizer_config.json's to name: `bpe.codes`, `spm.model`,
#: `tokenizer.4.0.0.json` through fast_tokenizer_files, ...), so every file of the kinds a vocabulary comes in is
#: bounded, whatever its name; weights and other files a tokenizer never opens are left alone.
VOCAB_JSON = ("tokenizer.json", "vocab.json")
VOCAB_PATTERNS = ("tokenizer*.json", "vocab*.json")
VOCAB_SUFFIXES = (".json", ".txt", ".model", ".codes", ".tiktoken", ".vocab", ".tokenizer", ".spm", ".bpe")
#: Files a folder may hold at its top level before it is not a model's (a released model has tens).
MAX_FOLDER_FILES = 4096
#: additional_chat_templates/: how many templates transformers may read (it reads every one).
MAX_EXTRA_TEMPLATES = 64
#: Settings files transformers reads with the tokenizer or processor.
SETTINGS = (
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.json",
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
)
TEMPLATE_FILES = ("chat_template.jinja",)
TEMPLATE_FOLDER = "additional_chat_templates"

#: Sizes and counts (integers) and epsilons (numbers) as transformers builds them; `null` is left to the
#: config class's own default. The upper bounds sit well above every released model (Llama 3.1 405B: hidden
#: 16,384, 126 layers; DeepSeek-V3: 256 experts; Llama 4: 10 M positions; Gemma 3: 262,208 vocabulary).
FIELDS: dict[str, tuple[type, float, float]] = {
    "num_hidden_layers": (int, 1, 512),
    "num_attention_heads": (int, 1, 1024),
    "num_key_value_heads": (int, 1, 1024),
    "hidden_size": (int, 1, 1 << 17),
    "intermediate_size": (int, 1, 1 << 20),
    "head_dim": (int, 1, 4096),
    "vocab_size": (int, 1, 1 << 24),
    "max_position_embeddings": (int, 1, 1 << 24),
    "sliding_window": (int, 1, (1 << 31) - 1),  # null says "no window"; a window of 0 tokens attends to nothing
    "num_experts": (int, 0, 4096),
    "num_local_experts": (int, 0, 4096),
    "n_routed_experts": (int, 0, 4096),
    "num_experts_per_tok": (int, 1, 4096),
    "n_shared_experts": (int, 0, 4096),
    "moe_intermediate_size": (int, 1, 1 << 20),
    "shared_expert_intermediate_size": (int, 0, 1 << 20),
    "kv_lora_rank": (int, 1, 1 << 16),
    "q_lora_rank": (int, 1, 1 << 16),
    "qk_rope_head_dim": (int, 1, 4096),
    "qk_nope_head_dim": (int, 0, 4096),
    "v_head_dim": (int, 1, 4096),
    "depth": (int, 1, 512),
    "num_heads": (int, 1, 1024),
    "embed_dim": (int, 1, 1 << 17),
    "out_hidden_size": (int, 1, 1 << 17),
    "patch_size": (int, 1, 4096),
    "spatial_merge_size": (int, 1, 64),
    "temporal_patch_size": (int, 1, 64),
    "in_channels": (int, 1, 64),
    "rms_norm_eps": (float, 0, 1),
    "layer_norm_eps": (float, 0, 1),
    "layer_norm_epsilon": (float, 0, 1),
    "rms_norm_epsilon": (float, 0, 1),
    "norm_eps": (float, 0, 1),
    "norm_epsilon": (float, 0, 1),
    "rope_theta": (float, 1e-3, 1e15),
    "rope_local_base_freq": (float, 1e-3, 1e15),
    # probabilities, scales and loss weights: a dropout of 1.5 or a NaN init fails in the first step, not at build
    "attention_dropout": (float, 0, 1),
    "hidden_dropout": (float, 0, 1),
    "dropout": (float, 0, 1),
    "activation_dropout": (float, 0, 1),
    "resid_pdrop": (float, 0, 1),
    "embd_pdrop": (float, 0, 1),
    "attn_pdrop": (float, 0, 1),
    "classifier_dropout": (float, 0, 1),
    "initializer_range": (float, 1e-12, 1),
    "router_aux_loss_coef": (float, 0, 1e6),
    "router_z_loss_coef": (float, 0, 1e6),
    "attn_logit_softcapping": (float, 1e-6, 1e6),
    "final_logit_softcapping": (float, 1e-6, 1e6),
    "query_pre_attn_scalar": (float, 1e-6, 1e9),
    "sliding_window_pattern": (int, 1, 4096),
}
#: Names some configs give the sizes above (their config class's attribute_map: GPT-2's n_layer, MPT's d_model, ...):
#: checked with the same bounds, and the shrink reads them where the usual name is absent.
ALIASES = {
    "n_layer": "num_hidden_layers",
    "n_layers": "num_hidden_layers",
    "num_layers": "num_hidden_layers",
    "n_embd": "hidden_size",
    "d_model": "hidden_size",
    "n_head": "num_attention_heads",
    "n_heads": "num_attention_heads",
    "n_positions": "max_position_embeddings",
    "n_ctx": "max_position_embeddings",
    "n_inner": "intermediate_size",
    "d_ff": "intermediate_size",
    "ffn_dim": "intermediate_size",
}
#: Fields transformers takes as booleans: any other JSON value would be read as true or false by its truth.
BOOLEANS = ("tie_word_embeddings", "use_sliding_window", "attention_bias", "mlp_bias", "use_cache", "norm_topk_prob", "use_qk_norm")
#: Token ids a config names: an id (or, for eos, a list of ids) below the vocabulary's size.
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
#: The dtypes a config may name (torch's own names, as transformers' `torch_dtype`/`dtype` reads them).
DTYPES = ("auto", "float32", "float16", "bfloat16", "float64", "float", "half", "double", "float8_e4m3fn", "float8_e5m2", "int8", "uint8")
#: Rotary-embedding settings (`rope_scaling`, 4.x; `rope_parameters`, 5.x): each numeric key with its bounds, as
#: transformers' rope validation states them (a factor below 1 shrinks the context it is meant to stretch).
ROPE_KEYS = ("rope_scaling", "rope_parameters")
ROPE_NUMBERS: dict[str, tuple[type, float, float]] = {
    "factor": (float, 1, 1e6),
    "low_freq_factor": (float, 1e-6, 1e6),
    "high_freq_factor": (float, 1e-6, 1e6),
    "beta_fast": (float, 1e-6, 1e6),
    "beta_slow": (float, 1e-6, 1e6),
    "attention_factor": (float, 1e-6, 1e6),
    "mscale": (float, 1e-6, 1e6),
    "mscale_all_dim": (float, 0, 1e6),
    "rope_theta": (float, 1e-3, 1e15),
    "partial_rotary_factor": (float, 1e-6, 1),
    "original_max_position_embeddings": (int, 1, 1 << 24),
}
EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")
#: Sub-configs checked like the top level (text_config, vision_config, audio_config, ...), but these.
NOT_MODEL = ("quantization_config",)


def remote_code(config: dict[str, Any]) -> dict[str, str]:
    """The classes the config asks to load from Python files beside it (`auto_map`), empty when none."""
    auto = config.get("auto_map")
    return {str(k): str(v) for k, v in auto.items()} if isinstance(auto, dict) else {}


def read_config(folder: Path) -> dict[str, Any]:
    """`config.json` of a model folder, checked (see the module), after the folder's tokenizer files are checked
    too; Refused naming the file, the field and the value otherwise."""
    path = folder / "config.json"
    if not folder.is_dir():
        raise Refused(f"{folder}: not a folder; give the folder that holds the model's config.json and tokenizer files")
    if not path.exists() and not path.is_symlink():
        raise Refused(f"{path}: no config.json in the folder; download it with the tokenizer files (no weights needed)")
    data = untrusted.read_json(path, untrusted.MODEL_CONFIG)
    if not isinstance(data, dict):
        raise Refused(f"{path}: {untrusted.kind_of(data)} in JSON, not an object; is this a model's config.json?")
    if not isinstance(data.get("model_type"), str) or not data["model_type"]:
        raise Refused(f"{path}: no model_type; a transformers config.json names its architecture in model_type")
    problems = field_problems(data)
    if problems:
        raise Refused(f"{path}: " + "; ".join(problems))
    check_tokenizer_files(folder)
    return data


def field_problems(config: dict[str, Any]) -> list[str]:
    """Every size, count or epsilon that transformers could not build at full size, as `field: problem` in the
    words a matrix file's fields use; heads that KV heads do not divide; a list `architectures` of names."""
    problems: list[str] = []
    parts = [("", config)] + [(f"{k}.", v) for k, v in config.items() if k.endswith("_config") and k not in NOT_MODEL and isinstance(v, dict)]
    for prefix, part in parts:
        checked: dict[str, Any] = {}
        for key, (want, lo, hi) in [*FIELDS.items(), *((a, FIELDS[c]) for a, c in ALIASES.items())]:
            value = part.get(key)
            if value is None:
                continue
            values = list(enumerate(value)) if isinstance(value, list) and value else [(None, value)]
            for index, item in values:
                number, problem = untrusted.number_problem(item, want, lo, hi)
                if problem:
                    problems.append(f"{prefix}{key}{'' if index is None else f'[{index}]'}: {problem}")
                elif index is None:
                    checked.setdefault(ALIASES.get(key, key), number)
        problems += _related(checked, prefix, part)
        problems += _typed(part, prefix, checked.get("vocab_size"))
    for key, value in config.items():
        if key.endswith("_config") and key not in NOT_MODEL and value is not None and not isinstance(value, dict):
            problems.append(f"{key}: must be an object (the sub-model's settings), got {untrusted.shown(value)}")
    problems += _towers(config)
    quant = config.get("quantization_config")
    if quant is not None and not (isinstance(quant, dict) and isinstance(quant.get("quant_method"), str)):
        problems.append(f"quantization_config: must be an object naming its quant_method, got {untrusted.shown(quant)}")
    arch = config.get("architectures")
    if arch is not None and not isinstance(arch, list):
        problems.append(f"architectures: must be a list of model class names, got {untrusted.kind_of(arch)}")
    for i, name in enumerate(arch if isinstance(arch, list) else []):
        if not isinstance(name, str) or not name.isidentifier():
            problems.append(f"architectures[{i}]: must be a model class name such as LlamaForCausalLM, got {untrusted.shown(name)}")
    return problems


def _typed(part: dict[str, Any], prefix: str, vocab: int | None) -> list[str]:
    """Booleans, token ids, the dtype and the rotary settings of one part of a config: values transformers would take
    by their truth or pass on unchecked, so a full-size load fails (or misbehaves) where the shrunk model does not."""
    problems = []
    for key in BOOLEANS:
        if key in part and part[key] is not None and not isinstance(part[key], bool):
            problems.append(f"{prefix}{key}: must be true or false, got {untrusted.shown(part[key])}")
    for key in TOKEN_IDS:
        value = part.get(key)
        ids = value if isinstance(value, list) and key == "eos_token_id" else [value]
        for item in ids if value is not None and not (key == "pad_token_id" and value == -1) else []:  # -1: LLaMA-1's "no pad"
            if isinstance(item, bool) or not isinstance(item, int) or item < 0 or (vocab is not None and item >= vocab):
                top = f" below vocab_size {vocab}" if vocab is not None else ""
                problems.append(f"{prefix}{key}: must be a token id (an integer from 0{top}), got {untrusted.shown(value)}")
                break
    for key in ("torch_dtype", "dtype"):
        value = part.get(key)
        if value is not None and (not isinstance(value, str) or value.removeprefix("torch.") not in DTYPES):
            problems.append(f"{prefix}{key}: {untrusted.shown(value)} is not a torch dtype ({', '.join(DTYPES[:4])}, ...)")
    for key in ROPE_KEYS:
        problems += _rope(part.get(key), f"{prefix}{key}")
    return problems


#: Sampling settings of a generation_config.json, as transformers' GenerationConfig means them (NaN loads, then fails
#: the first sampling step).
SAMPLING: dict[str, tuple[type, float, float]] = {
    "temperature": (float, 0, 1e6),
    "top_p": (float, 0, 1),
    "top_k": (int, 0, 1 << 24),
    "max_new_tokens": (int, 1, 1 << 24),
}


def generation_problems(data: Any) -> list[str]:
    """A generation_config.json: an object whose sampling settings are numbers in range."""
    if not isinstance(data, dict):
        return [f"must be an object of generation settings, got {untrusted.kind_of(data)}"]
    return _ranged(data, SAMPLING, "")


def _ranged(data: dict[str, Any], table: dict[str, tuple[type, float, float]], prefix: str, skip: tuple[str, ...] = ()) -> list[str]:
    """`prefix key: problem` for each number of a flat table of bounds that `data` sets (null is left to transformers)."""
    problems = []
    for key, (want, lo, hi) in table.items():
        if data.get(key) is not None and key not in skip:
            _, problem = untrusted.number_problem(data[key], want, lo, hi)
            if problem:
                problems.append(f"{prefix}{key}: {problem}")
    return problems


def _towers(config: dict[str, Any]) -> list[str]:
    """A vision tower whose output width is not the text model's: its features cannot be merged into the text stream
    (the meta build makes both towers without noticing; the first image does)."""
    vision, text = config.get("vision_config"), config.get("text_config")
    width = vision.get("out_hidden_size") if isinstance(vision, dict) else None
    hidden = (text if isinstance(text, dict) else config).get("hidden_size")
    if isinstance(width, int) and isinstance(hidden, int) and not isinstance(width, bool) and 0 < width != hidden > 0:
        return [f"vision_config.out_hidden_size: {width} is not the text model's hidden_size {hidden}; image features could not join the text"]
    return []


def _rope(value: Any, where: str) -> list[str]:
    """A rotary setting: nothing, or an object (5.x also one per layer type) of a named type and numbers in range."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f'{where}: must be an object such as {{"rope_type": "linear", "factor": 2.0}}, got {untrusted.shown(value)}']
    if value and all(isinstance(v, dict) for v in value.values()):  # per layer type: {"full_attention": {...}, ...}
        return [p for k, v in value.items() for p in _rope(v, f"{where}.{k}")]
    problems = []
    for name in ("rope_type", "type"):
        if name in value and not isinstance(value[name], str):
            problems.append(f"{where}.{name}: must be a name such as 'linear' or 'yarn', got {untrusted.shown(value[name])}")
    kind = value.get("rope_type", value.get("type"))
    problems += _ranged(value, ROPE_NUMBERS, f"{where}.", skip=("factor",) if kind == "default" else ())
    section = value.get("mrope_section")
    if section is not None and not (isinstance(section, list) and section and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in section)):
        problems.append(f"{where}.mrope_section: must be a list of positive integers, got {untrusted.shown(section)}")
    return problems


def _related(sizes: dict[str, Any], prefix: str, part: dict[str, Any] | None = None) -> list[str]:
    """What single fields cannot show: KV heads that do not divide the heads, more experts per token than
    experts, more expert blocks than a full-size check can build in seconds, mrope sections that do not fill the
    rotary half of the head (the shrink rescales them, so only the full size shows it)."""
    problems = []
    head_dim = sizes.get("head_dim") or (
        sizes["hidden_size"] // sizes["num_attention_heads"] if sizes.get("hidden_size") and sizes.get("num_attention_heads") else None
    )
    for key in ROPE_KEYS:
        rope = (part or {}).get(key)
        section = rope.get("mrope_section") if isinstance(rope, dict) else None
        if head_dim and isinstance(section, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in section) and 2 * sum(section) != head_dim:
            problems.append(f"{prefix}{key}.mrope_section: {section} sums to {sum(section)}; head_dim {head_dim} needs {head_dim // 2}")
    heads, kv = sizes.get("num_attention_heads"), sizes.get("num_key_value_heads")
    if heads and kv and heads % kv:
        problems.append(
            f"{prefix}num_key_value_heads: {kv} does not divide num_attention_heads {heads}; each key/value head serves an equal group of query heads"
        )
    experts = max((sizes.get(k) or 0 for k in EXPERT_COUNTS), default=0)
    routed = sizes.get("num_experts_per_tok")
    if experts and routed and routed > experts:
        problems.append(f"{prefix}num_experts_per_tok: {routed} is more than the {experts} experts")
    layers = sizes.get("num_hidden_layers") or 0
    if layers * max(1, experts) > untrusted.MAX_LAYER_EXPERTS:
        problems.append(
            f"{prefix}num_hidden_layers: {layers} layers of {experts} experts are {layers * experts:,} expert blocks, more than "
            f"{untrusted.MAX_LAYER_EXPERTS:,} (the largest released models have about 25,000)"
        )
    return problems


def check_tokenizer_files(folder: Path) -> None:
    """Every tokenizer, processor and chat-template file the folder holds, within its kind's bounds: the JSON
    ones parsed (a damaged file would make transformers fall back to other loaders with misleading errors),
    the vocabulary counted, the chat template's length bounded."""
    tokens = 0
    counted = {p.name for pattern in VOCAB_PATTERNS for p in folder.glob(pattern)} - set(SETTINGS)
    for name in sorted(set(VOCAB_JSON) | counted):
        path = folder / name
        if path.exists() or path.is_symlink():
            data = untrusted.read_json(path, untrusted.TOKENIZER)
            tokens = max(tokens, token_count(data))
            del data
            if tokens > untrusted.MAX_TOKENS:
                raise Refused(
                    f"{path}: {tokens:,} tokens, more than a tokenizer may hold ({untrusted.MAX_TOKENS:,}; the largest released vocabularies "
                    "hold about 262,000); is this the model's own tokenizer?"
                )
    for path in _vocabulary_files(folder):
        if path.name not in counted and path.name not in SETTINGS and path.name not in VOCAB_JSON and path.name != "config.json":
            untrusted.regular_size(path, untrusted.TOKENIZER)
    for name in SETTINGS:
        path = folder / name
        if path.exists() or path.is_symlink():
            data = untrusted.read_json(path, untrusted.TOKENIZER_SETTINGS)
            if name == "generation_config.json" and (problems := generation_problems(data)):
                raise Refused(f"{path}: " + "; ".join(problems))
            template = data.get("chat_template") if isinstance(data, dict) else None
            if template is not None:
                _check_template_field(path, template)
    for path in template_files(folder):
        untrusted.read_text(path, untrusted.CHAT_TEMPLATE)


def _vocabulary_files(folder: Path) -> list[Path]:
    """The folder's top-level files of the kinds a vocabulary comes in (any name); Refused for a folder of more files than
    a model's."""
    found = []
    for i, path in enumerate(folder.iterdir()):
        if i >= MAX_FOLDER_FILES:
            raise Refused(f"{folder}: more than {MAX_FOLDER_FILES:,} files; a model's folder holds tens (give the folder with config.json and the tokenizer)")
        if path.suffix.lower() in VOCAB_SUFFIXES and not path.is_dir():
            found.append(path)
    return found


def _check_template_field(path: Path, template: Any) -> None:
    """A settings file's chat_template: a template's text, or a list of named ones (`{"name": …, "template": …}`), each
    within the chat template's bound; anything else makes transformers fall back to loaders with misleading errors."""
    named = isinstance(template, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str) for t in template)
    if not isinstance(template, str) and not named:
        raise Refused(f'{path}: chat_template must be a template\'s text or a list of {{"name": …, "template": …}}, got {untrusted.shown(template)}')
    size = len(template) if isinstance(template, str) else sum(len(t["template"]) for t in template)
    if size > untrusted.CHAT_TEMPLATE.max_bytes:
        raise Refused(
            f"{path}: its chat_template holds {size:,} characters, more than a chat template may "
            f"({untrusted.size_text(untrusted.CHAT_TEMPLATE.max_bytes)}); {untrusted.CHAT_TEMPLATE.hint}"
        )


def template_files(folder: Path) -> list[Path]:
    """The chat-template files of a folder (chat_template.jinja and additional_chat_templates/*.jinja)."""
    found = [folder / n for n in TEMPLATE_FILES if (folder / n).exists() or (folder / n).is_symlink()]
    extra = folder / TEMPLATE_FOLDER
    if extra.is_dir():
        more = []
        for path in extra.glob("*.jinja"):  # transformers reads every one: each is bounded, and how many
            more.append(path)
            if len(more) > MAX_EXTRA_TEMPLATES:
                raise Refused(f"{extra}: more than {MAX_EXTRA_TEMPLATES} chat templates; transformers reads every one (a model ships a few)")
        found += sorted(more)
    return found


def token_count(data: Any) -> int:
    """How many tokens a tokenizer.json (its model's vocabulary and its added tokens) or a vocab.json holds."""
    if not isinstance(data, dict):
        return 0
    model = data.get("model")
    if not isinstance(model, dict):
        return len(data)
    vocab = model.get("vocab")
    if isinstance(vocab, list):  # Unigram: [piece, score] pairs
        vocab = {e[0]: None for e in vocab if isinstance(e, list) and e and isinstance(e[0], str)}
    vocab = vocab if isinstance(vocab, dict) else {}
    added = data.get("added_tokens")
    extra = sum(1 for a in added if not isinstance(a, dict) or a.get("content") not in vocab) if isinstance(added, list) else 0
    return len(vocab) + extra  # added tokens that are in the vocabulary already are not counted twice


def template_origin(folder: Path) -> str:
    """Where a folder's chat template comes from, to name it in a refusal."""
    files = template_files(folder)
    if files:
        return str(files[0])
    for name in ("chat_template.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            return f"{folder / name} (chat_template)"
    return f"the chat template of {folder}"
