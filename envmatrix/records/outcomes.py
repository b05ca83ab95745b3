"""THE outcome table: every fact about an outcome class in one row (name, glyph, colours, short code,
default remedy, whether a control may expect it, precedence), read by matrix.yaml controls, the
classifier, the records and every output, so adding or restyling a class is one edit here.

Also the verdict (the outcome with its evidence and remedy), because a verdict fixed before any run
(a skipped cell, a failed build, the GPU guard) needs nothing but this table: the record contract
builds one without importing the classifier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import Any


class Named(str, Enum):
    """A string enum whose members read as their JSON value (in f-strings too, not `Outcome.OK`), so
    code names them through the enum while files and messages keep the plain words."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class Outcome(Named):
    """What a cell's run showed. Declaration order is the order users see in lists (schema, `expect:` errors);
    precedence is the table's `rank`."""

    @property
    def facts(self) -> OutcomeFacts:
        """This outcome's row of the table."""
        return TABLE[self]

    OK = "ok"
    INCONCLUSIVE = "inconclusive"
    GARBLED_OUTPUT = "garbled_output"
    NAN_LOSS = "nan_loss"
    ZERO_GRAD = "zero_grad"
    GRAD_LOST = "grad_lost"
    DDP_READY_TWICE = "ddp_ready_twice"
    SIGFPE = "sigfpe"
    IMPORT_ABI = "import_abi"
    UNKNOWN_MODEL = "unknown_model"
    ENGINE_ERROR = "engine_error"
    API_MISMATCH = "api_mismatch"
    MISSING_MODULE = "missing_module"
    UNSUPPORTED_GPU = "unsupported_gpu"
    DRIVER_TOO_OLD = "driver_too_old"
    OOM = "oom"
    NCCL_ERROR = "nccl_error"
    TIMEOUT = "timeout"
    CRASH = "crash"
    ERROR = "error"
    WRONG_GPU = "wrong_gpu"
    BUILD_FAILED = "build_failed"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class OutcomeFacts:
    """One row of the table.

    `rank`: precedence, lower wins. A root cause ranks before its consequences (a SIGFPE that kills rank 1
    before the NCCL timeout rank 0 logs next; a NaN loss before the crash it causes in `generate`). The
    classifier tries its rules in rank order; `skipped`, `build_failed` and `wrong_gpu` (the GPU guard,
    which overrides any verdict of a run that reported its device) are decided before or after the rules,
    and `inconclusive`, then `ok`, only when no rule fires.
    """

    outcome: Outcome
    glyph: str  # beside the name in the terminal and the HTML: ✓ ok, · skipped, ? inconclusive, ✗ a failure
    colour: str  # the HTML cell's background
    style: str  # the terminal's rich style
    code: str  # the compact terminal table's 2-3 letters
    remedy: str  # what to do when the evidence shows no more than the class (classify.remedy refines it)
    expectable: bool  # a control may declare it with `expect:` (a failure mode a probe can provoke)
    rank: int

    @property
    def name(self) -> str:
        return self.outcome.value

    def as_dict(self) -> dict[str, Any]:
        """Plain values for templates and JSON."""
        return {
            "name": self.name,
            "glyph": self.glyph,
            "colour": self.colour,
            "style": self.style,
            "code": self.code,
            "remedy": self.remedy,
            "expectable": self.expectable,
            "rank": self.rank,
        }


FAILURE_GLYPH = "✗"
_FAIL = "red"


def _row(outcome: Outcome, glyph: str, colour: str, style: str, code: str, expectable: bool, rank: int, remedy: str) -> tuple[Outcome, OutcomeFacts]:
    return outcome, OutcomeFacts(outcome, glyph, colour, style, code, remedy, expectable, rank)


# fmt: off
TABLE: Mapping[Outcome, OutcomeFacts] = MappingProxyType(dict([
    #    outcome                  glyph  colour     style     code   expect rank
    _row(Outcome.OK,              "✓", "#1a7f37", "green",  "OK",  False, 22,
         "nothing to fix: this stack trains cleanly in this scenario"),
    _row(Outcome.INCONCLUSIVE,    "?", "#bf8700", "yellow", "INC", False, 21,
         "nothing shows that training ran: log the first steps' grad_norm (e.g. logging_steps=1) or run the probe, "
         "and pass the exit status (--exit-code) if the process ended"),
    _row(Outcome.GARBLED_OUTPUT,  "✗", "#8250df", _FAIL,    "GO",  True,  14,
         "install the flash-attn wheel built for this exact torch version, CUDA and C++ ABI "
         "(pip install flash-attn --no-build-isolation), pad on the left for generation, or fall back to sdpa"),
    _row(Outcome.NAN_LOSS,        "✗", "#cf222e", _FAIL,    "NL",  True,  13,
         "use num_generations >= 2 (a group of one has no std); for Gemma-2 use eager attention or flash-attn >= 2.6.3; prefer bf16 over fp16"),
    _row(Outcome.ZERO_GRAD,       "✗", "#bc4c00", _FAIL,    "ZG",  True,  16,
         "sample with temperature ~1.0 and top_p 0.8-1.0, and do not let the model's generation_config override "
         "the trainer's sampling settings; if completions are gibberish, check attention (garbled output)"),
    _row(Outcome.GRAD_LOST,       "✗", "#bf3989", _FAIL,    "GL",  True,  15,
         "use gradient_checkpointing_kwargs={'use_reentrant': False}, or call model.enable_input_require_grads() "
         "before training with frozen inputs (LoRA, frozen embeddings), or disable gradient checkpointing"),
    _row(Outcome.DDP_READY_TWICE, "✗", "#0969da", _FAIL,    "DRT", True,  12,
         "use gradient_checkpointing_kwargs={'use_reentrant': False}, or ddp_find_unused_parameters=False, or static_graph=True"),
    _row(Outcome.SIGFPE,          "✗", "#a40e26", _FAIL,    "SIG", True,  3,
         "on H20/Hopper use cuBLAS >= 12.3.4.1 / 12.4.5.8 (torch cu124+ wheels) and make sure that library is the one "
         "loaded (check LD_LIBRARY_PATH for an older system CUDA)"),
    _row(Outcome.IMPORT_ABI,      "✗", "#953800", _FAIL,    "IA",  True,  4,
         "install the flash-attn (or extension) wheel whose torch version, CUDA and CXX11 ABI match the installed torch; "
         "make sure no system CUDA shadows pip's libraries"),
    _row(Outcome.UNKNOWN_MODEL,   "✗", "#7d4e00", _FAIL,    "UM",  True,  5,
         "this transformers release does not know the model's architecture (model_type): upgrade transformers to a release "
         "that has it (envmatrix preflight --matrix names the first), or load the model's own code with trust_remote_code"),
    _row(Outcome.ENGINE_ERROR,    "✗", "#6639ba", _FAIL,    "EE",  True,  6,
         "the training engine (DeepSpeed ZeRO, FSDP, accelerate) failed: match its versions to the trainer's and transformers' "
         "(envmatrix names the known cases with their fixes), or rerun the scenario without the engine to tell it from the model"),
    _row(Outcome.API_MISMATCH,    "✗", "#8a4600", _FAIL,    "AM",  True,  7,
         "two installed releases do not go together (one calls an API the other does not have): align them, upgrading or pinning "
         "the calling package or the called one to the range the caller supports"),
    _row(Outcome.MISSING_MODULE,  "✗", "#7d4e00", _FAIL,    "MM",  True,  8,
         "install the missing module (pip install <its distribution>), or pin the package that imports it to a release "
         "that declares or no longer needs it"),
    _row(Outcome.UNSUPPORTED_GPU, "✗", "#6e7781", _FAIL,    "UG",  True,  10,
         "use a torch/flash-attn build that ships kernels for this GPU architecture, or another GPU (FlashAttention-2 needs sm80+)"),
    _row(Outcome.DRIVER_TOO_OLD,  "✗", "#6e7781", _FAIL,    "DTO", True,  9,
         "use a torch build for an older CUDA (e.g. cu126 instead of cu130), or upgrade the NVIDIA driver"),
    _row(Outcome.OOM,             "✗", "#cf222e", _FAIL,    "OOM", True,  11,
         "lower the batch size or sequence length, enable gradient checkpointing, or use a GPU with more memory"),
    _row(Outcome.NCCL_ERROR,      "✗", "#0550ae", _FAIL,    "NE",  True,  18,
         "look for the rank that failed first (its error is the cause); otherwise check NCCL_DEBUG=INFO output, "
         "the network between GPUs, and raise the collective timeout only if a step is legitimately slow"),
    _row(Outcome.TIMEOUT,         "✗", "#9a6700", _FAIL,    "TIM", True,  19,
         "the run hung or was too slow: look at the log tail for the last step reached; raise --timeout if it was making progress"),
    _row(Outcome.CRASH,           "✗", "#a40e26", _FAIL,    "CRA", True,  17,
         "the process was killed by a signal or the GPU faulted: check the system log for the OOM killer (signal 9) or a native "
         "crash (signal 11); for a device fault (illegal memory access, launch failure) rerun with CUDA_LAUNCH_BLOCKING=1 to find "
         "the kernel, and check that compiled extensions (flash-attn) were built for this torch"),
    _row(Outcome.ERROR,           "✗", "#57606a", _FAIL,    "ERR", True,  20,
         "read the evidence line and the log tail: this failure matches no known signature"),
    _row(Outcome.WRONG_GPU,       "✗", "#e16f24", _FAIL,    "WG",  False, 2,
         "the cell ran on another GPU type than its id names (or on none): pin the job to that GPU type "
         "(Slurm partition/constraint, runner label, nodeSelector) and run it again; its result says nothing about the GPU named"),
    _row(Outcome.BUILD_FAILED,    "✗", "#24292f", _FAIL,    "BF",  False, 1,
         "read the failing build step in the log; pin versions that publish wheels for this Python/CUDA"),
    _row(Outcome.SKIPPED,         "·", "#8c959f", "dim",    "SKI", False, 0,
         "see the reason: the catalog rules this combination out"),
]))
# fmt: on

OUTCOME_NAMES: tuple[str, ...] = tuple(o.value for o in Outcome)

#: Outcomes a control may declare with `expect:`; the rest are not failure modes a probe can provoke.
EXPECTABLE: tuple[str, ...] = tuple(o.value for o in Outcome if TABLE[o].expectable)


@dataclass(frozen=True)
class FindingKind:
    """A finding judged across cells, shown beside the outcome classes but never a cell's outcome: so it never
    changes a cell's class, its control state or its vetting (drift: outputs/drift.py)."""

    name: str
    glyph: str
    colour: str
    style: str
    code: str
    remedy: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "glyph": self.glyph, "colour": self.colour, "style": self.style, "code": self.code, "remedy": self.remedy}


DRIFT = FindingKind(
    "drift",
    "≈",
    "#fff8c5",
    "yellow",
    "DRF",
    "this stack trains, but computes different numbers from the reference on the same weights and inputs: read what "
    "differs (a config default, the attention path) in the changed release's notes before upgrading; keep the "
    "reference release where curves must match, or re-baseline your metrics on the new one",
)
FINDING_KINDS: Mapping[str, FindingKind] = MappingProxyType({DRIFT.name: DRIFT})


def facts_of(outcome: str) -> OutcomeFacts:
    """The row of an outcome given by name (ValueError for a name that is not an Outcome)."""
    return TABLE[Outcome(outcome)]


def glyph(outcome: str) -> str:
    """The glyph for an outcome: ✓ ok, · skipped, ? inconclusive, ✗ any failure class."""
    return facts_of(outcome).glyph


def table_for_templates() -> dict[str, dict[str, Any]]:
    """The table as plain mappings by name, in declaration order: what the HTML template is given."""
    return {o.value: TABLE[o].as_dict() for o in Outcome}


@dataclass(frozen=True)
class Verdict:
    """The classification of one run: the outcome, the line that shows it, and what to do."""

    outcome: Outcome
    evidence: str
    remedy: str
    rule: str
    also: tuple[Outcome, ...] = ()

    @classmethod
    def of(cls, outcome: str, evidence: str, remedy: str, rule: str, also: tuple[str, ...] = ()) -> Verdict:
        """A verdict from outcome names (ValueError for a name that is not an Outcome)."""
        return cls(Outcome(outcome), evidence, remedy, rule, tuple(Outcome(a) for a in also))

    def as_dict(self) -> dict[str, Any]:
        """JSON form: `class`, `evidence`, `remedy`, plus the rule and the other classes seen."""
        return {"class": self.outcome.value, "evidence": self.evidence, "remedy": self.remedy, "rule": self.rule, "also": [a.value for a in self.also]}


def decided(outcome: str, evidence: str, rule: str) -> Verdict:
    """A verdict fixed without classifying a run (a cell the catalog or the runner skips, a failed build, a
    backend that raised, the GPU guard), with the outcome's default remedy."""
    return Verdict.of(outcome, evidence, facts_of(outcome).remedy, rule)
