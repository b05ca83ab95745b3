"""A user's TRL GRPO settings (a `GRPOConfig` as YAML or JSON, or a TRL recipe that mixes it with the model
arguments, as open-r1's do) mapped onto the probe's scenario fields.

Every key is accounted for: mapped onto a field (validated as a matrix file's scenario field is, with the
file and line on error), or listed as not modelled with its value. Nothing is silently dropped: a user must
see which of their settings the smoke run did not reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes import untrusted

from ..errors import InputError, SpecError
from ..spec.matrix import CHOICES, Checker
from ..spec.yamlsrc import Source, load_yaml

#: GRPOConfig (and TRL's model-argument) keys that are a scenario field under another name.
RENAMED = {
    "learning_rate": "lr",
    "num_generations": "num_generations",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "beta": "beta",
    "seed": "seed",
    "use_vllm": "use_vllm",
    "use_peft": "lora",
    "attn_implementation": "attn",
}
#: Keys of `model_init_kwargs` read like top-level keys (TRL passes them to from_pretrained).
INIT_KWARGS = ("attn_implementation", "torch_dtype", "dtype")
#: Keys read as sampling settings inside `generation_kwargs` (TRL passes them to the GenerationConfig).
GENERATION = ("temperature", "top_p", "top_k")
DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "half": "fp16", "float32": "fp32", "fp32": "fp32", "float": "fp32"}
#: Keys that decide precision or checkpointing, read together below.
DECIDED = ("bf16", "fp16", "torch_dtype", "dtype", "gradient_checkpointing", "gradient_checkpointing_kwargs", "model_init_kwargs", "generation_kwargs")


@dataclass(frozen=True)
class Mapped:
    """What the file set: scenario fields (name → value), keys the probe does not model (key → value as
    written), and notes on how an unset default was read."""

    fields: dict[str, Any] = field(default_factory=dict)
    unmodelled: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


def read(path: Path) -> Mapped:
    """The file's settings mapped; InputError/SpecError (exit 2) naming the file, line and key when one is wrong."""
    if not path.is_file():
        raise InputError(f"--grpo-config {path}: no such file; give a GRPOConfig as YAML or JSON")
    src = load_yaml(path, untrusted.GRPO_CONFIG)  # JSON is YAML: one bounded loader, errors with their line
    if not isinstance(src.data, dict):
        raise InputError(f"{path}: a GRPO config is a mapping of GRPOConfig keys (learning_rate: 1e-6, ...), not {type(src.data).__name__}")
    return map_settings(src)


def map_settings(src: Source) -> Mapped:
    """Map a loaded GRPO config; every problem is collected and raised together (SpecError)."""
    data: dict[str, Any] = src.data
    ck = Checker(src)
    fields_: dict[str, Any] = {}
    unmodelled: dict[str, Any] = {}
    notes: list[str] = []

    def take(name: str, value: Any, where: tuple[Any, ...]) -> None:
        if value is None:  # TRL's "unset": top_k None disables top-k (the probe's 0); else the probe's default
            if name == "top_k":
                fields_[name] = 0
            else:
                notes.append(f"{'.'.join(map(str, where))}: null, so the probe's default")
            return
        if name == "attn" and isinstance(value, str) and value not in CHOICES["attn"]:
            ck.err(where, f"'{value}' is not an attention implementation the probe runs ({', '.join(CHOICES['attn'])})")
            return
        converted = ck.scalar(name, value, where)
        if converted is not None:
            fields_[name] = converted

    init = data.get("model_init_kwargs")
    init = init if isinstance(init, dict) else {}
    for key, value in data.items():
        if key in RENAMED:
            take(RENAMED[key], value, (key,))
        elif key not in DECIDED:
            unmodelled[key] = value
    for key in INIT_KWARGS:
        if key in init and key == "attn_implementation" and "attn_implementation" not in data:
            take("attn", init[key], ("model_init_kwargs", key))
    for key, value in init.items():
        if key not in INIT_KWARGS:
            unmodelled[f"model_init_kwargs.{key}"] = value
    generation = data.get("generation_kwargs")
    if isinstance(generation, dict):
        for key, value in generation.items():
            if key in GENERATION and key not in data:
                take(key, value, ("generation_kwargs", key))
            elif key != "do_sample" or value is not True:
                unmodelled[f"generation_kwargs.{key}"] = value
    elif generation is not None:
        unmodelled["generation_kwargs"] = generation
    _precision(data, init, fields_, ck, notes)
    _checkpointing(data, fields_, ck, notes, unmodelled)
    _groups(data, fields_, ck)
    if ck.problems:
        raise SpecError(ck.problems)
    if fields_.get("use_vllm"):
        fields_["trainer"] = "trl"
        notes.append("use_vllm: generation with vLLM runs through TRL's GRPOTrainer (trainer trl), which needs trl and a CUDA GPU")
    return Mapped(fields_, unmodelled, tuple(notes))


#: The batch keys whose product TRL's GRPOConfig requires num_generations to divide (one process: world size 1).
BATCH = ("per_device_train_batch_size", "gradient_accumulation_steps")


def _groups(data: dict[str, Any], fields_: dict[str, Any], ck: Checker) -> None:
    """What TRL's GRPOConfig refuses before a step runs: fewer than 2 generations per prompt (a group of one has no
    standard deviation), and a generation batch that num_generations does not divide (said for one process; TRL counts
    every process's batch)."""
    generations = fields_.get("num_generations")
    if not isinstance(generations, int):
        return
    if generations < 2:
        ck.err(("num_generations",), f"{generations}: GRPO needs at least 2 completions per prompt (a group of one has no standard deviation)")
        return
    sizes = [data.get(k, 1) for k in BATCH]
    if all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
        batch = sizes[0] * sizes[1]
        explicit = data.get("generation_batch_size")
        batch = explicit if isinstance(explicit, int) and not isinstance(explicit, bool) and explicit > 0 else batch
        if batch % generations and "per_device_train_batch_size" in data:
            ck.err(
                ("num_generations",),
                f"{generations} does not divide the generation batch of one process ({batch}: per_device_train_batch_size x "
                "gradient_accumulation_steps, or generation_batch_size); TRL's GRPOConfig refuses it",
            )


def _precision(data: dict[str, Any], init: dict[str, Any], fields_: dict[str, Any], ck: Checker, notes: list[str]) -> None:
    """bf16 / fp16 flags (the Trainer's autocast) decide the dtype; else the model's torch_dtype."""
    for flag in ("bf16", "fp16"):
        if flag in data and not isinstance(data[flag], bool) and data[flag] is not None:
            ck.err((flag,), f"must be true or false, got {data[flag]!r}")
    if data.get("bf16") and data.get("fp16"):
        ck.err(("fp16",), "bf16 and fp16 are both true; a run trains in one of them")
    elif data.get("bf16"):
        fields_["dtype"] = "bf16"
    elif data.get("fp16"):
        fields_["dtype"] = "fp16"
    else:
        candidates = [((k,), data.get(k)) for k in ("torch_dtype", "dtype")] + [(("model_init_kwargs", k), init.get(k)) for k in ("torch_dtype", "dtype")]
        named = next(((where, v) for where, v in candidates if v), None)
        if named is not None:
            where, value = named
            if str(value) in DTYPES:
                fields_["dtype"] = DTYPES[str(value)]
            elif str(value) != "auto":
                ck.err(where, f"'{value}' is not a dtype the probe trains in (bfloat16, float16, float32)")
        if "bf16" not in data and "fp16" not in data:
            notes.append(f"bf16/fp16 not set in the file: the probe trains in {fields_.get('dtype', 'fp32')} (a TRL release's own default is not assumed)")


def _checkpointing(data: dict[str, Any], fields_: dict[str, Any], ck: Checker, notes: list[str], unmodelled: dict[str, Any]) -> None:
    """gradient_checkpointing and its use_reentrant → the probe's grad_ckpt (off, reentrant, non_reentrant)."""
    on = data.get("gradient_checkpointing")
    kwargs = data.get("gradient_checkpointing_kwargs")
    if on is not None and not isinstance(on, bool):
        ck.err(("gradient_checkpointing",), f"must be true or false, got {on!r}")
        return
    if kwargs is not None and not isinstance(kwargs, dict):
        ck.err(("gradient_checkpointing_kwargs",), f"must be a mapping (use_reentrant: false), got {kwargs!r}")
        return
    kwargs = kwargs or {}
    for key, value in kwargs.items():
        if key != "use_reentrant":
            unmodelled[f"gradient_checkpointing_kwargs.{key}"] = value
    if on is None:
        notes.append("gradient_checkpointing not set in the file: the probe trains without it (a TRL release's own default is not assumed)")
        return
    if not on:
        fields_["grad_ckpt"] = "off"
        return
    reentrant = kwargs.get("use_reentrant")
    if reentrant is None:
        notes.append("gradient_checkpointing_kwargs.use_reentrant not set: run as reentrant, transformers' own default; set it to be sure")
        reentrant = True
    elif not isinstance(reentrant, bool):
        ck.err(("gradient_checkpointing_kwargs", "use_reentrant"), f"must be true or false, got {reentrant!r}")
        return
    fields_["grad_ckpt"] = "reentrant" if reentrant else "non_reentrant"
