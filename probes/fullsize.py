"""A user's architecture checked at full size before it is shrunk: their config.json loaded into its own config
class and the model built on PyTorch's meta device (shapes only: no memory, no weights), so every shape and
divisibility error a real load would meet is found first and answered as bad input, naming the file. Only the
model class that transformers (or the user's trusted remote code) defines for that config is ever built:
`architectures` is checked against it, never looked up and called as any attribute of transformers.

A 70B dense config builds in well under a second; per-expert MoE modules cost Python time (DeepSeek-V3:
seconds), so modelfolder.py bounds layers x experts first. Weight initialisation is skipped (transformers'
`no_init_weights`): on the meta device it does nothing but costs most of the time.
"""

from __future__ import annotations

import contextlib
import importlib.util
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import transformers

from probes import untrusted
from probes.modelfolder import remote_code
from probes.record import ProbeInputError

#: What a config that cannot be built raises while its modules are made (a negative or zero size, a head
#: count that does not divide, a malformed rope dict). Import errors and attribute errors are not here: they
#: say something of the environment (a package, an API this release lacks), and the verdict judges them.
BUILD_ERRORS = (ValueError, TypeError, RuntimeError, ZeroDivisionError, IndexError, KeyError, AssertionError, OverflowError)
#: Auto classes whose mapping names a generating class for a config (text, then image-text models).
GENERATING_AUTO = ("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES")


@dataclass(frozen=True)
class Arch:
    """The user's architecture as checked: their config as read (once), its config class, how its model class
    is built, and what the full-size build found."""

    raw: dict[str, Any]
    config_class: type
    make: Callable[[Any], Any]
    name: str
    notes: tuple[str, ...]
    params: int
    seconds: float

    def full_size_note(self) -> str:
        return f"full size: {self.name}, {self.params:,} parameters, built on the meta device in {self.seconds} s"


def first_line(exc: BaseException, limit: int = 400) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


def config_class(raw: dict[str, Any], folder: Path) -> type:
    """The config class transformers has for `model_type`, or the trusted remote code's (auto_map)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if raw["model_type"] in CONFIG_MAPPING:
        found: type = CONFIG_MAPPING[raw["model_type"]]
        return found
    return type(transformers.AutoConfig.from_pretrained(str(folder), trust_remote_code=True))


def _refused_by_config(exc: BaseException) -> bool:
    """A config class's own validation: ValueError and kin (4.x), huggingface_hub's strict dataclasses (5.x)."""
    return isinstance(exc, BUILD_ERRORS) or any(c.__name__ == "StrictDataclassError" for c in type(exc).__mro__)


def load_config(cls: type, data: dict[str, Any], where: Path, folder: Path) -> Any:
    """`data` in its config class; a refusal from the class (its own validation) is bad input naming the file. Only the
    class runs here, on the user's values: an AttributeError from transformers' own class is one of them (a rope setting
    that is no object, a dtype torch has no name for); from remote code it may be an API the installed release lacks."""
    try:
        config = cls.from_dict(data)  # type: ignore[attr-defined]
    except Exception as exc:
        own = isinstance(exc, AttributeError) and cls.__module__.startswith("transformers.")
        if not (_refused_by_config(exc) or own):
            raise
        said = first_line(exc.__cause__ if exc.__cause__ is not None and not isinstance(exc, BUILD_ERRORS) else exc)
        raise ProbeInputError(f"{where}: transformers {transformers.__version__} refuses it: {said}") from None
    if remote_code(data):
        config._name_or_path = str(folder)  # where auto_map's modeling file is loaded from
    return config


def _defines(cls: Any, config: Any) -> bool:
    """Whether `cls` is a model class built from this config's class."""
    wanted = getattr(cls, "config_class", None)
    return isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel) and isinstance(wanted, type) and isinstance(config, wanted)


def _mapped(model_type: str) -> list[str]:
    """The model classes transformers' auto mappings name for `model_type` (generating ones first)."""
    from transformers.models.auto import modeling_auto

    tables = [*GENERATING_AUTO, *sorted(n for n in dir(modeling_auto) if n.startswith("MODEL_") and n.endswith("_MAPPING_NAMES") and n not in GENERATING_AUTO)]
    names: list[str] = []
    for table in tables:
        mapping = getattr(modeling_auto, table, None)
        name = mapping.get(model_type) if isinstance(mapping, dict) else None
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


def _generating(model_type: str, config: Any) -> Any:
    """transformers' own generating class for this config (causal LM, then image-text), or None."""
    from transformers.models.auto import modeling_auto

    for table in GENERATING_AUTO:
        mapping = getattr(modeling_auto, table, None)
        name = mapping.get(model_type) if isinstance(mapping, dict) else None
        cls = getattr(transformers, name, None) if isinstance(name, str) else None
        if _defines(cls, config):
            return cls
    return None


def _own(cls: type, model_type: str) -> str:
    return f"{cls.__name__}, transformers' generating class for {model_type}"


def _can_generate(cls: Any) -> bool:
    check = getattr(cls, "can_generate", None)
    return bool(check()) if callable(check) else hasattr(cls, "generate")


def model_maker(raw: dict[str, Any], config: Any, where: Path, *, trusted: bool) -> tuple[Callable[[Any], Any], str, list[str]]:
    """How to build the model class `architectures[0]` names, checked: a class transformers defines for this
    config (one that can generate; a base class gives way to transformers' own generating class for the config,
    said in a note), or the trusted remote code's class (auto_map). Anything else is refused, naming it."""
    names = raw.get("architectures") or []
    named = names[0] if names else None
    model_type = raw["model_type"]
    if getattr(config, "is_encoder_decoder", False):
        raise ProbeInputError(
            f"{where}: model_type {model_type!r} is an encoder-decoder model; GRPO (the probe's loop and TRL's trainer) trains decoder-only "
            "and image-text models"
        )
    own: Any = getattr(transformers, named, None) if isinstance(named, str) and named.isidentifier() and not named.startswith("_") else None
    if _defines(own, config):
        if _can_generate(own):
            return own, own.__name__, []
        fallback = _generating(model_type, config)
        if fallback is not None:
            return fallback, fallback.__name__, [f"architectures[0] {named} cannot generate: trained {_own(fallback, model_type)}"]
    if remote_code(raw) and trusted and model_type not in _config_types():
        auto = transformers.AutoModelForCausalLM

        def remote(cfg: Any) -> Any:
            return auto.from_config(cfg, trust_remote_code=True)

        return remote, str(named or "the auto_map class"), []
    if named is None:
        fallback = _generating(model_type, config)
        if fallback is not None:
            return fallback, fallback.__name__, [f"no architectures in config.json: trained {_own(fallback, model_type)}"]
        raise ProbeInputError(f"{where}: no architectures, and transformers {transformers.__version__} has no generating class for model_type {model_type!r}")
    known = _mapped(model_type)
    defined = f"; it defines {', '.join(known[:8])}" if known else ""
    raise ProbeInputError(
        f"{where}: architectures[0]: {untrusted.shown(named)} is not a model class transformers {transformers.__version__} defines for "
        f"model_type {model_type!r} ({type(config).__name__}){defined}"
    )


def _config_types() -> Any:
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    return CONFIG_MAPPING


@contextlib.contextmanager
def _on_meta() -> Any:
    """Modules made on the meta device, their weight initialisation skipped (transformers' own switch: in
    modeling_utils up to 4.x, in initialization from 5.0; without it the build is only slower)."""
    from transformers import modeling_utils

    no_init = getattr(modeling_utils, "no_init_weights", None)
    if no_init is None:
        with contextlib.suppress(ImportError):
            from transformers import initialization  # type: ignore[attr-defined]  # 5.x only

            no_init = getattr(initialization, "no_init_weights", None)
    with torch.device("meta"), no_init() if no_init is not None else contextlib.nullcontext():
        yield


def _blame(raw: dict[str, Any], text: str) -> str:
    """The fields whose text value an error message quotes (`'nope'` → hidden_act, `'bogus'` → rope_scaling.rope_type),
    to name them; nested objects are looked into."""
    named = [f"{k}: {v!r}" for k, v in _leaves(raw) if isinstance(v, str) and len(v) >= 2 and (repr(v) in text or f'"{v}"' in text)]
    return f" (the value of {', '.join(named[:3])})" if named else ""


def _leaves(data: dict[str, Any], prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        if isinstance(value, dict) and depth < 4:
            out += _leaves(value, f"{prefix}{key}.", depth + 1)
        else:
            out.append((f"{prefix}{key}", value))
    return out


def rotary_problem(config: Any) -> str | None:
    """An odd rotary dimension: rotary embeddings rotate pairs of dimensions, so a model whose head (or its rotated part)
    is odd builds on the meta device but fails at its first forward; None where the config has no rotary embedding."""
    parts = [config] + [getattr(config, k) for k in ("text_config",) if getattr(config, k, None) is not None]
    for part in parts:
        rope = any(getattr(part, k, None) is not None for k in ("rope_theta", "rope_scaling", "rope_parameters"))
        heads, hidden = getattr(part, "num_attention_heads", None), getattr(part, "hidden_size", None)
        head_dim = getattr(part, "head_dim", None) or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 else None)
        if not rope or not isinstance(head_dim, int):
            continue
        share = getattr(part, "partial_rotary_factor", None)
        rotary = int(head_dim * share) if isinstance(share, (int, float)) and not isinstance(share, bool) and 0 < share <= 1 else head_dim
        if rotary % 2:
            said = f"head_dim {head_dim}" + (f" × partial_rotary_factor {share} = {rotary}" if rotary != head_dim else "")
            source = "" if getattr(part, "head_dim", None) else f" (hidden_size {hidden} / num_attention_heads {heads})"
            return f"head_dim: {said}{source} is odd; rotary embeddings rotate pairs of dimensions, so the full-size model fails at its first forward"
    return None


def build_on_meta(make: Callable[[Any], Any], config: Any, where: Path, name: str, raw: dict[str, Any]) -> tuple[int, float]:
    """Build the model on the meta device: (parameters, seconds), or bad input naming the file, what failed, and
    the field whose value the error quotes."""
    t = time.perf_counter()
    try:
        with _on_meta():
            model = make(config)
    except BUILD_ERRORS as exc:
        said = f"{type(exc).__name__}: {first_line(exc)}"
        raise ProbeInputError(f"{where}: transformers {transformers.__version__} cannot build {name} at full size from it: {said}{_blame(raw, said)}") from None
    params = sum(p.numel() for p in model.parameters())
    return params, round(time.perf_counter() - t, 3)


def check(raw: dict[str, Any], folder: Path, *, trusted: bool) -> Arch:
    """The user's config at full size: loaded into its config class, its model class checked, the model built
    on the meta device. Bad input (exit 2) naming the file, the field and the value where anything fails."""
    where = folder / "config.json"
    cls = config_class(raw, folder)
    config = load_config(cls, raw, where, folder)
    if (odd := rotary_problem(config)) is not None:
        raise ProbeInputError(f"{where}: {odd}")
    check_generation_config(folder)
    make, name, notes = model_maker(raw, config, where, trusted=trusted)
    params, seconds = build_on_meta(make, config, where, name, raw)
    return Arch(raw=raw, config_class=cls, make=make, name=name, notes=tuple(notes), params=params, seconds=seconds)


def check_generation_config(folder: Path) -> None:
    """generation_config.json as the user's own load reads it (transformers' GenerationConfig and its validation):
    refused with its message, naming the file, where that load would fail."""
    path = folder / "generation_config.json"
    if not path.is_file():
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            transformers.GenerationConfig.from_pretrained(str(folder))
    except Exception as exc:  # any refusal of the user's file: ValueError, TypeError, KeyError, a JSON error
        raise ProbeInputError(f"{path}: transformers {transformers.__version__} cannot load it: {type(exc).__name__}: {first_line(exc)}") from None


def quantization_note(raw: dict[str, Any]) -> str | None:
    """What a quantization_config means here: the tiny model trains unquantized, and whether the packages the user's own
    load needs for that method (transformers' quantizer says which) are installed in this environment."""
    quant = raw.get("quantization_config")
    if not isinstance(quant, dict):
        return None
    method = str(quant.get("quant_method"))
    wanted: list[str] = []
    with contextlib.suppress(Exception):
        from transformers.quantizers.auto import AUTO_QUANTIZER_MAPPING

        key = f"{method}_{'4bit' if quant.get('load_in_4bit') else '8bit'}" if method == "bitsandbytes" else method
        wanted = list(getattr(AUTO_QUANTIZER_MAPPING.get(key), "required_packages", None) or [])
    missing = [p for p in wanted if importlib.util.find_spec(p.replace("-", "_")) is None]
    needs = (
        f"; its load needs {', '.join(wanted)}" + (f", and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed here" if missing else "")
        if wanted
        else ""
    )
    return f"quantization_config ({untrusted.printable(method)[:40]}): the tiny model trains unquantized{needs}"


def largest_parameter(make: Callable[[Any], Any], config: Any) -> tuple[int, str]:
    """The shrunk model's parameter count and its largest parameter (name and shape), from a meta build."""
    with _on_meta():
        model = make(config)
    params = list(model.named_parameters())
    name, biggest = max(params, key=lambda kv: kv[1].numel()) if params else ("", torch.empty(0))
    return sum(p.numel() for _, p in params), f"{name} {list(biggest.shape)}"
