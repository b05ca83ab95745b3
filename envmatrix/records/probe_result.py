"""THE probe's result (`result.json`) as a type: what the probe measured, read once, as untrusted input.

The probe (probes/record.py, grpo_smoke.py, train.py, trl_trainer.py, envfacts.py, kernels.py, parity.py,
grpo.py) writes result.json again at every stage, so a result may stop after any section; it may also
come from another host, an older probe or a damaged file. Reading never raises: a file that cannot be
read or is not a JSON object gives a result marked `unreadable` (with why); a field of the wrong type
is left at its default and named in `problems`; text and lists are cut to bounded sizes. The fields'
types are the contract, and probe-result.schema.json is generated from them.

The result keeps the object as written (`raw`), because the record embeds it unchanged: other envmatrix
versions may read fields this one does not know.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from probes import untrusted

from ..errors import InputError
from ..jsonio import read_json_bounded
from .schema import hints, json_key, object_schema

#: A result.json larger than this is not one (a probe writes a few KiB).
MAX_RESULT_BYTES = untrusted.PROBE_RESULT.max_bytes
MAX_TEXT = 16 * 1024  # characters kept of one string (the probe cuts error messages at 4000)
MAX_ITEMS = 4096  # entries kept of one list or object (grad norms: one per step)
MAX_DEPTH = 8  # nesting of free JSON (TRL's config)

Scalar = str | int | float | bool | None
T = TypeVar("T")


def _doc(text: str, *, key: str | None = None, required: bool = False) -> dict[str, Any]:
    """Field metadata: its description in the schema, its JSON name, whether the probe always writes it."""
    return {"doc": text, **({"key": key} if key else {}), **({"required": True} if required else {})}


@dataclass(frozen=True)
class ProbeOptions:
    """The probe's command-line options as it parsed them (grpo_smoke.build_parser; `out` left out)."""

    model: str | None = None
    device: str | None = None
    dtype: str | None = None
    attn: str | None = None
    grad_ckpt: str | None = None
    lora: bool | None = None
    freeze_embeddings: bool | None = None
    input_grad_hook: bool | None = None
    num_generations: int | None = None
    std: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    steps: int | None = None
    beta: float | None = None
    lr: float | None = None
    seed: int | None = None
    find_unused_parameters: bool | None = None
    static_graph: bool | None = None
    saved_gen_config: str | None = None
    kernels: str | None = None
    fault: str | None = None
    trainer: str | None = None
    parallel: str | None = None
    use_vllm: bool | None = None
    collective_timeout: float | None = None
    shrink: bool | None = None
    trust_remote_code: bool | None = None


@dataclass(frozen=True)
class ProbeTimings:
    """Seconds per stage, rounded to milliseconds; `total_s` is updated at every save."""

    total_s: float | None = None
    import_s: float | None = None
    build_s: float | None = None
    parity_s: float | None = None
    kernels_s: float | None = None
    fingerprint_s: float | None = None
    train_s: float | None = None


@dataclass(frozen=True)
class EnvFacts:
    """What the process actually ran on, read inside the environment (probes/envfacts.py): the GPU guard checks
    `device` and `gpu_name` against the cell."""

    python: str | None = None
    platform: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cxx11_abi: bool | None = None
    transformers: str | None = None
    tokenizers: str | None = None
    flash_attn: str | None = None
    peft: str | None = None
    device: str | None = None
    cudnn: int | None = None
    cublas: str | None = None
    nccl: str | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None
    driver: str | None = None
    cpu_threads: int | None = None


@dataclass(frozen=True)
class Fault:
    """The injected failure a control asked for, and whether it was applied (`note`: why not)."""

    name: str | None = None
    applied: bool | None = None
    note: str | None = None


@dataclass(frozen=True)
class TokenizerInfo:
    """What a checkpoint's own tokenizer needed before it could generate a batch (`--model PATH` only)."""

    pad_from_eos: bool | None = field(default=None, metadata=_doc("it had no pad token: eos pads, as TRL does"))
    chat_template: bool | None = field(default=None, metadata=_doc("prompts went through its chat template"))
    token_type_ids: bool | None = field(default=None, metadata=_doc("it returned token_type_ids: no longer asked for (generate refuses them)"))


@dataclass(frozen=True)
class Shrunk:
    """A user's architecture made tiny from its config.json (`--shrink`): what it is and what was shrunk."""

    model_type: str | None = None
    layers: int | None = field(default=None, metadata=_doc("decoder layers kept"))
    params: int | None = field(default=None, metadata=_doc("parameters of the tiny model"))
    changes: Mapping[str, str] = field(default_factory=dict, metadata=_doc("config key → 'full size → tiny'"))
    notes: tuple[str, ...] = field(default=(), metadata=_doc("what the probe decided for the user's config (remote code, ids)"))


@dataclass(frozen=True)
class ModelInfo:
    """The model the probe built: its source (family or folder), whether it is a VLM, attention, class."""

    source: str | None = None
    vision: bool | None = None
    attn: str | None = None
    class_name: str | None = field(default=None, metadata=_doc("the model's Python class", key="class"))
    trainable_vision_params: int | None = None
    tokenizer: TokenizerInfo | None = None
    shrunk: Shrunk | None = None


@dataclass(frozen=True)
class Generation:
    """A saved near-greedy generation_config (scenario `saved_gen_config`): what was saved, what the scenario
    asked, how the settings were passed, and the share of distinct completions per step."""

    saved: Mapping[str, Scalar] = field(default_factory=dict)
    asked: Mapping[str, Scalar] = field(default_factory=dict)
    passed_as: str | None = None
    distinct_ratio: tuple[float, ...] = ()


@dataclass(frozen=True)
class ParityPath:
    """One input path's attention parity (text, or a VLM's image path)."""

    rel_err: float | None = None
    baseline_rel_err: float | None = None
    tolerance: float | None = None
    within_tolerance: bool | None = None


@dataclass(frozen=True)
class Parity:
    """Logits of (implementation, dtype) vs fp32 eager on a left-padded batch; the worst path's figures."""

    implementation: str | None = None
    dtype: str | None = None
    rel_err: float | None = None
    baseline_rel_err: float | None = None
    tolerance: float | None = None
    within_tolerance: bool | None = None
    padding_side: str | None = None
    family: str | None = None
    path: str | None = None
    paths: Mapping[str, ParityPath] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelCheck:
    """One real-size kernel call (probes/kernels.py): its label (model, op, dtype and sizes) and, for a
    failure, the problem. Fields are in the order the probe writes them: evidence quotes them so."""

    model: str | None = None
    op: str | None = None
    dtype: str | None = None
    m: int | None = None
    k: int | None = None
    n: int | None = None
    seq: int | None = None
    heads: int | None = None
    head_dim: int | None = None
    problem: str | None = field(default=None, metadata=_doc("raised, non_finite or mismatch"))
    error: str | None = None
    rel_err: float | None = None
    tolerance: float | None = None


@dataclass(frozen=True)
class Kernels:
    """The kernel stage: the check running now (on disk before it runs, so a crash names it), then the totals."""

    running: KernelCheck | None = None
    scale: str | None = None
    checked: int | None = None
    failures: tuple[KernelCheck, ...] = ()
    dtypes: tuple[str, ...] = ()
    worst: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class InputGradHook:
    """The input-requires-grad hooks the libraries added, and how many a control removed."""

    hooks_after_setup: int | None = None
    removed: int | None = None


@dataclass(frozen=True)
class Params:
    """Trainable parameters that got a gradient and that changed (the TRL tiny-model test's criterion)."""

    trainable: int | None = None
    with_grad: int | None = None
    without_grad: tuple[str, ...] = ()
    changed: int | None = None
    unchanged: tuple[str, ...] = ()
    all_got_grad: bool | None = None
    all_changed: bool | None = None


@dataclass(frozen=True)
class EngineInfo:
    """The engine (scenario `parallel`) and proof that it engaged: FSDP2's parameters are DTensors, ZeRO-3's
    are partitioned; whole values and gradients are what `params` compared. Under TRL, accelerate's view too."""

    parallel: str | None = field(default=None, metadata=_doc("ddp, zero2, zero3 or fsdp2"))
    sharded: bool | None = field(
        default=None, metadata=_doc("the engine shards state across ranks (ZeRO: optimizer and gradients, ZeRO-3 and FSDP2: parameters too)")
    )
    params: int | None = None
    dtensor_params: int | None = field(default=None, metadata=_doc("FSDP2: parameters that are DTensors"))
    zero_stage: int | None = None
    partitioned_params: int | None = field(default=None, metadata=_doc("DeepSpeed: parameters ZeRO-3 partitioned (0 under ZeRO-2)"))
    deepspeed: str | None = None
    distributed_type: str | None = field(default=None, metadata=_doc("trainer trl: accelerate's distributed type (DEEPSPEED, FSDP, MULTI_CPU, ...)"))


@dataclass(frozen=True)
class TrlInfo:
    """The `trainer: trl` path: TRL's version, the GRPOConfig it was given, and the options it did not take."""

    version: str | None = None
    config: Mapping[str, object] = field(default_factory=dict)
    not_applied: Mapping[str, Scalar] = field(default_factory=dict)
    left_out: tuple[str, ...] = ()
    defaults_kept: Mapping[str, Scalar] = field(default_factory=dict)
    vllm: str | None = field(default=None, metadata=_doc("use_vllm: the vLLM version whose engine generated (colocate mode)"))


@dataclass(frozen=True)
class LogpSummary:
    """The teacher-forced completions' per-token log-probabilities at step 0, summarised."""

    tokens: int | None = field(default=None, metadata=_doc("completion tokens under the mask"))
    digest: str | None = field(default=None, metadata=_doc("sha256 of the fp32 values: equal digests, identical numbers"))
    max_abs: float | None = None
    mean_abs: float | None = None
    finite: bool | None = None
    samples: tuple[tuple[float, ...], ...] = field(default=(), metadata=_doc("[sequence, position, log-probability] located samples"))


@dataclass(frozen=True)
class FingerprintStep:
    """One step of the fixed, teacher-forced GRPO update (plain SGD): step 0 is before any update."""

    step: int | None = None
    loss: float | str | None = field(default=None, metadata=_doc("the GRPO loss against step 0's log-probabilities (a non-finite one as text)"))
    nll: float | str | None = field(default=None, metadata=_doc("mean negative log-likelihood of the completions"))
    grad_norm: float | str | None = None
    grad_norm_groups: Mapping[str, float | str] = field(default_factory=dict, metadata=_doc("step 0: per parameter group (embed, attention, mlp, norm, head)"))


@dataclass(frozen=True)
class FingerprintNoise:
    """What the precision alone moves: the same forward in fp32 (bf16 and fp16 only)."""

    logp_vs_fp32: float | None = None


@dataclass(frozen=True)
class Fingerprint:
    """The numbers this stack computes on inputs every environment shares (probes/fingerprint.py): reference
    weights, fixed teacher-forced completions; compared across environments by envmatrix/outputs/drift.py."""

    version: str | None = None
    dtype: str | None = None
    device: str | None = field(default=None, metadata=_doc("device kind: cpu or cuda"))
    attn: str | None = field(default=None, metadata=_doc("the attention implementation the model ran"))
    family: str | None = None
    weights: str | None = field(default=None, metadata=_doc("reference (drawn from the parameter names) or checkpoint"))
    weights_digest: str | None = None
    config: Mapping[str, Scalar] = field(default_factory=dict, metadata=_doc("the text config's scalars: where a changed default shows"))
    logp: LogpSummary | None = None
    steps: tuple[FingerprintStep, ...] = ()
    noise: FingerprintNoise | None = None
    error: str | None = field(default=None, metadata=_doc("why the numbers could not be taken (the run went on)"))


@dataclass(frozen=True)
class ProbeError:
    """The exception that ended the probe, and the stage it was in."""

    type: str | None = None
    message: str | None = None
    stage: str | None = None


@dataclass(frozen=True)
class ProbeResult:
    """One probe run's result.json (rank 0's; other ranks write result.rank<N>.json of the same type)."""

    probe_version: str | None = field(default=None, metadata=_doc("the result's layout version", required=True))
    rank: int | None = None
    pid: int | None = None
    world_size: int | None = None
    options: ProbeOptions = field(default_factory=ProbeOptions)
    finished: bool | None = field(default=None, metadata=_doc("the probe finished every step it measures", required=True))
    stage: str | None = field(default=None, metadata=_doc("the stage reached: import, build, parity, kernels, setup, train, done", required=True))
    steps_completed: int | None = field(default=None, metadata=_doc("training steps completed", required=True))
    first_nonfinite_step: int | None = field(default=None, metadata=_doc("the first step whose loss or grad_norm was not finite"))
    timings: ProbeTimings = field(default_factory=ProbeTimings)
    env: EnvFacts | None = None
    fault: Fault | None = None
    model: ModelInfo | None = None
    generation: Generation | None = None
    parity: Parity | None = None
    kernels: Kernels | None = None
    input_grad_hook: InputGradHook | None = None
    trainable_params: int | None = None
    samples: tuple[str, ...] = field(default=(), metadata=_doc("the first step's completions, as Python reprs"))
    grad_norm_first_steps: tuple[float, ...] = field(default=(), metadata=_doc("grad_norm per step, before clipping; NaN where not finite"))
    params: Params | None = None
    engine: EngineInfo | None = None
    trl: TrlInfo | None = None
    fingerprint: Fingerprint | None = None
    error: ProbeError | None = None
    # how the file read: not part of result.json
    unreadable: str | None = field(default=None, compare=False, metadata={"internal": True})
    problems: tuple[str, ...] = field(default=(), compare=False, metadata={"internal": True})
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False, metadata={"internal": True})

    @classmethod
    def parse(cls, data: Any, source: str = "result.json") -> ProbeResult:
        """The typed result of a parsed result.json; never raises (see the module's docstring)."""
        if not isinstance(data, dict):
            return cls(unreadable=f"{source}: expected a JSON object, found {_kind(data)}")
        problems: list[str] = []
        parsed = _read_dataclass(cls, data, "", problems, 0)
        return dataclasses.replace(parsed, problems=tuple(f"{source}: {p}" for p in problems), raw=data)

    @classmethod
    def failed(cls, why: str) -> ProbeResult:
        """A result that could not be read at all."""
        return cls(unreadable=why)

    @property
    def readable(self) -> bool:
        return self.unreadable is None

    @property
    def empty(self) -> bool:
        """No field at all (an unreadable file, or `{}`)."""
        return not self.raw

    @property
    def env_as_written(self) -> dict[str, Any] | None:
        """`env` exactly as the probe wrote it, when it is an object: the record keeps it as `environment.facts`."""
        value = self.raw.get("env")
        return value if isinstance(value, dict) else None

    def as_json(self) -> dict[str, Any] | None:
        """result.json as the probe wrote it (None when unreadable), for outputs that echo it."""
        return dict(self.raw) if self.readable else None


def read_probe_result(path: Path) -> ProbeResult | None:
    """The result.json at `path`; None when the probe wrote none (it never started, or a stale one was removed)."""
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = read_json_bounded(path, MAX_RESULT_BYTES, "a probe result")
    except InputError as exc:
        return ProbeResult.failed(str(exc))
    return ProbeResult.parse(data, str(path))


def parse_env(data: Any) -> EnvFacts | None:
    """A record's `environment.facts` (the probe's `env`) as EnvFacts; None when it is not an object."""
    if not isinstance(data, dict):
        return None
    return _read_dataclass(EnvFacts, data, "", [], 0)


# ---- reading by the types ---------------------------------------------------------------------------

_BAD = object()  # a value of the wrong type: the field keeps its default


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(type(value), type(value).__name__)


def _read_dataclass(cls: type[T], data: dict[str, Any], where: str, problems: list[str], depth: int) -> T:
    """An instance of `cls` from a JSON object: each known key read by its field's type; unknown keys ignored."""
    kinds = hints(cls)  # type: ignore[arg-type]  # a class is hashable; mypy types T as an instance type
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # cls is a dataclass
        if f.metadata.get("internal"):
            continue
        key = json_key(f)
        if key not in data:
            continue
        value = _read(kinds[f.name], data[key], f"{where}.{key}" if where else key, problems, depth + 1)
        if value is not _BAD:
            values[f.name] = value
    return cls(**values)


def _read(hint: Any, value: Any, where: str, problems: list[str], depth: int) -> Any:
    """`value` as `hint` says, or _BAD (and a problem named) when it is of another type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        members = [a for a in args if a is not type(None)]
        if len(members) == 1:  # X | None
            return _read(members[0], value, where, problems, depth)
        for member in members:  # scalars: the first that fits (bool is not a number here)
            got = _read(member, value, where, [], depth)
            if got is not _BAD:
                return got
        return _problem(problems, where, f"expected {' or '.join(_name(m) for m in members)}, found {_kind(value)}")
    if hint is str:
        if not isinstance(value, str):
            return _problem(problems, where, f"expected text, found {_kind(value)}")
        if len(value) > MAX_TEXT:
            problems.append(f"{where}: cut to {MAX_TEXT} of {len(value)} characters")
            return value[:MAX_TEXT]
        return value
    if hint is bool:
        return value if isinstance(value, bool) else _problem(problems, where, f"expected true or false, found {_kind(value)}")
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return value if ok else _problem(problems, where, f"expected a whole number, found {_kind(value)}")
    if hint is float:  # NaN and infinity are measurements here (a loss that overflowed), not damage
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _problem(problems, where, f"expected a number, found {_kind(value)}")
    if origin is tuple:
        if not isinstance(value, list):
            return _problem(problems, where, f"expected a list, found {_kind(value)}")
        items = [_read(args[0], item, f"{where}[{i}]", problems, depth + 1) for i, item in enumerate(_bounded(value, where, problems))]
        return tuple(item for item in items if item is not _BAD)
    if origin is Mapping:
        if not isinstance(value, dict):
            return _problem(problems, where, f"expected an object, found {_kind(value)}")
        entries = dict(_bounded(list(value.items()), where, problems))
        read = {str(k): _read(args[1], v, f"{where}.{k}", problems, depth + 1) for k, v in entries.items()}
        return {k: v for k, v in read.items() if v is not _BAD}
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            return _problem(problems, where, f"expected an object, found {_kind(value)}")
        return _read_dataclass(typing.cast(type[Any], hint), value, where, problems, depth)
    return value if _free_json_ok(value, depth) else _problem(problems, where, f"nested deeper than {MAX_DEPTH} levels or too large")


def _name(hint: Any) -> str:
    return {str: "text", int: "a whole number", float: "a number", bool: "true or false"}.get(hint, "an object")


def _problem(problems: list[str], where: str, message: str) -> object:
    problems.append(f"{where}: {message}; ignored")
    return _BAD


def _bounded(items: list[Any], where: str, problems: list[str]) -> list[Any]:
    if len(items) > MAX_ITEMS:
        problems.append(f"{where}: cut to {MAX_ITEMS} of {len(items)} entries")
        return items[:MAX_ITEMS]
    return items


def _free_json_ok(value: Any, depth: int) -> bool:
    """Free JSON (TRL's config values) within the depth, text and size bounds."""
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, str):
        return len(value) <= MAX_TEXT
    if isinstance(value, list):
        return len(value) <= MAX_ITEMS and all(_free_json_ok(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return len(value) <= MAX_ITEMS and all(_free_json_ok(v, depth + 1) for v in value.values())
    return value is None or isinstance(value, (bool, int, float))


# ---- the published schema ---------------------------------------------------------------------------

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "probe-result.schema.json"


def json_schema() -> dict[str, Any]:
    """A JSON Schema of result.json, generated from the types above (published as probe-result.schema.json)."""
    body = object_schema(ProbeResult, describe=True)
    for name in [f.name for f in dataclasses.fields(ProbeResult) if f.metadata.get("internal")]:
        del body["properties"][name]
    body.pop("description", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "envmatrix probe result (result.json)",
        "description": "What the GRPO smoke probe measured in one run, written again at every stage: a result may stop after any section. "
        "NaN and Infinity appear where a measurement was not finite.",
        **body,
    }


if __name__ == "__main__":  # python -m envmatrix.records.probe_result > probe-result.schema.json
    print(json.dumps(json_schema(), indent=2))
