"""The taxonomy of run outcomes: shared by matrix.yaml controls, the classifier and the reports."""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """What a cell's run showed. Order is not precedence: classify.py owns precedence."""

    def __str__(self) -> str:  # the name users see, in f-strings too (not `Outcome.OK`)
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    OK = "ok"
    INCONCLUSIVE = "inconclusive"
    GARBLED_OUTPUT = "garbled_output"
    NAN_LOSS = "nan_loss"
    ZERO_GRAD = "zero_grad"
    GRAD_LOST = "grad_lost"
    DDP_READY_TWICE = "ddp_ready_twice"
    SIGFPE = "sigfpe"
    IMPORT_ABI = "import_abi"
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


OUTCOME_NAMES: tuple[str, ...] = tuple(o.value for o in Outcome)

#: How the terminal and the HTML show an outcome beside its name (every failure class: ✗). `inconclusive`: no
#: failure seen, but no evidence of training either (an empty log, only warnings): never shown as ok.
GLYPHS: dict[str, str] = {"ok": "✓", "skipped": "·", "inconclusive": "?"}
FAILURE_GLYPH = "✗"


def glyph(outcome: str) -> str:
    """The glyph for an outcome: ✓ ok, · skipped, ? inconclusive, ✗ any failure class."""
    return GLYPHS.get(outcome, FAILURE_GLYPH)


#: Outcomes a control may declare with `expect:`; the rest are not failure modes a probe can provoke.
EXPECTABLE: tuple[str, ...] = tuple(
    o.value for o in Outcome if o not in (Outcome.OK, Outcome.INCONCLUSIVE, Outcome.SKIPPED, Outcome.BUILD_FAILED, Outcome.WRONG_GPU)
)
