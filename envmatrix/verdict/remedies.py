"""Remedies that fit what the log shows, read from its structure: which two packages do not go together and over which
name, the range a package says it needs, the engine layer that raised, the library code and what it means, the GPU's
capability against what the run asked of it, a loss that diverged after healthy steps.

Each returns None where the log does not show enough, and the caller falls back to the outcome's own remedy.
"""

from __future__ import annotations

import math
import re

from ..facts import catalog, errorcodes
from .evidence import Range, engine_layer, fallback, last_exception, ranges, strong
from .imports import Missing, read_missing
from .logscan import LogScan

_KEYWORD = re.compile(r"(?P<callee>[\w.]+)\(\) got an unexpected keyword argument '(?P<name>\w+)'")
_POSITIONAL = re.compile(r"(?P<callee>[\w.]+)\(\) (?:missing \d+ required (?:keyword-only |positional )?arguments?: (?P<name>'\w+')|takes .* given)")
_ATTRIBUTE = re.compile(r"(?:'(?P<cls>\w+)' object|module '(?P<mod>[\w.]+)'|type object '(?P<type>\w+)') has no attribute '(?P<name>\w+)'")


def _who(name: str) -> str:
    return "your code" if name in ("", "user") else name


def api_mismatch(scan: LogScan) -> str | None:
    """Name the caller, the called and the missing or unexpected name; the stated range where a package said one."""
    judged = strong(scan, "api_mismatch") or last_exception(scan)
    stated: list[Range] = ranges(scan)
    advice = (
        f"install {stated[0].package} {stated[0].needed} (the range {stated[0].said_by or 'the package'} states; {stated[0].found} is installed), "
        f"or move the package that states it to a release that supports {stated[0].found}"
        if stated
        else None
    )
    if judged is None:
        return f"{advice}; in a matrix, the finding's axes say which releases" if advice else None
    raised = judged.raised
    if (imported := _imported(raised.value)) is not None:
        return _import_advice(imported, _who(raised.package), advice)
    caller, called = raised.caller, raised.package
    pair = f"{_who(caller)} calls {_who(called)}" if caller and called else f"{_who(called or caller)} and the package it calls"
    detail = ""
    if m := _KEYWORD.search(raised.value):
        detail = f"{m.group('callee')}() does not take the keyword {m.group('name')!r} that is passed to it"
    elif m := _POSITIONAL.search(raised.value):
        detail = f"{m.group('callee')}() is called with arguments its installed release does not take ({raised.value.splitlines()[0][:120]})"
    elif m := _ATTRIBUTE.search(raised.value):
        owner = m.group("cls") or m.group("mod") or m.group("type")
        detail = f"{owner} has no {m.group('name')!r} in the installed release"
    head = f"{pair} with an API the installed release does not have" + (f": {detail}" if detail else "")
    fix = advice or (
        "align the two: install the release of the called package that the caller was written for, or upgrade the caller to a "
        "release written for the installed one (its changelog or setup.py names the range)"
    )
    return f"{head}; {fix}; in a matrix, the finding's axes say which releases"


def _imported(message: str) -> Missing | None:
    """The name (or submodule) an import asked of an installed package, where the message is an import failure."""
    if not message.startswith(("cannot import name", "No module named")):
        return None
    return read_missing(message.split("\n", 1)[0])


def _import_advice(missing: Missing, importer: str, advice: str | None) -> str:
    """`megatron imports get_accelerator from deepspeed, which the installed deepspeed lacks: …` (the importing frame is the
    import statement's: its package is the importer)."""
    what = f"{missing.name} from {missing.module}" if missing.name else f"the module {missing.module}"
    head = f"{importer} imports {what}, which the installed {missing.install} release does not have: the two are releases that do not go together"
    fix = advice or (
        f"install the {missing.install} release {importer} was written for, or move {importer} to a release written for the "
        f"installed {missing.install} (its changelog or requirements name the range)"
    )
    return f"{head}; {fix}; in a matrix, the finding's axes say which releases"


def engine(scan: LogScan) -> str | None:
    """A new failure inside an engine: that layer's own remedy."""
    judged = fallback(scan) or last_exception(scan)
    layer = engine_layer(judged) if judged is not None else None
    return layer.remedy if layer is not None else None


def code(scan: LogScan, outcome: str) -> str | None:
    """The remedy a library code has of its own (a device-side assert, an ECC error, a CUDA that could not initialise)."""
    for found, _ in scan.codes:
        if found.outcome == outcome and found.remedy:
            return found.remedy
    for judged in scan.judged:
        for found in errorcodes.find(judged.raised.value):
            if found.outcome == outcome and found.remedy:
                return found.remedy
    return None


_CC = re.compile(r"capability\D{0,30}?\(?(?P<major>\d{1,2})\s*[,.]\s*(?P<minor>\d)\)?|\bsm_?(?P<sm>\d{2,3})\b", re.I)


def gpu_capability(text: str) -> tuple[int, int] | None:
    """The compute capability a text says the GPU has: `capability (7, 5)`, `compute capability 7.5`, `sm_75`, or a GPU
    the catalog knows by name. The lowest one named is the GPU's (a message also names what it would need)."""
    found: list[tuple[int, int]] = []
    for m in _CC.finditer(text):
        if m.group("sm"):
            sm = m.group("sm")
            found.append((int(sm[:-1]), int(sm[-1])))
        else:
            found.append((int(m.group("major")), int(m.group("minor"))))
    for gpu in catalog.GPUS.values():
        if gpu.compute_capability and re.search(gpu.pattern, text):
            found.append(gpu.compute_capability)
    return min(found) if found else None


def unsupported_gpu(scan: LogScan) -> str | None:
    """What this GPU lacks of what the run asked (bf16, FlashAttention-2/3, fp8) and what to use instead."""
    judged = strong(scan, "unsupported_gpu")
    texts = [judged.raised.value] if judged is not None else []
    hit = scan.first("unsupported_gpu")
    texts += [hit.line] if hit else []
    text = " ".join(texts)
    cc = gpu_capability(text)
    if cc is None:
        return None
    lacking = [(need, why) for need, (needed, why) in catalog.NEEDS.items() if cc < needed and re.search(_need_word(need), text, re.I)]
    lacking = lacking or [(need, why) for need, (needed, why) in catalog.NEEDS.items() if cc < needed][:2]
    if not lacking:
        return None
    instead = {"bf16": "train in fp16 (with loss scaling) or fp32", "FlashAttention-2": "use attn_implementation='sdpa'",
               "FlashAttention-3": "use FlashAttention-2 or sdpa", "fp8": "train in bf16 or fp16"}  # fmt: skip
    said = "; ".join(f"{why}: {instead[need]}" for need, why in lacking)
    return f"this GPU has compute capability {cc[0]}.{cc[1]}; {said}; or run on a newer GPU"


def _need_word(need: str) -> str:
    return {"bf16": r"bf16|bfloat16", "FlashAttention-2": r"flash|fa2", "FlashAttention-3": r"fa3|flash_attn_3|hopper", "fp8": r"fp8|float8|e4m3|e5m2"}[need]


def divergence(scan: LogScan, metrics: tuple[dict[str, object], ...]) -> str | None:
    """A loss that turned NaN after several healthy logged steps diverged: the group size does not explain it."""
    healthy = 0
    for row in metrics:
        values = [row.get(k) for k in ("loss", "grad_norm") if isinstance(row.get(k), (int, float))]
        if values and not all(math.isfinite(float(v)) for v in values):  # type: ignore[arg-type]
            break
        healthy += bool(values)
    if not metrics and scan.nonfinite is not None:
        at = scan.nonfinite.line_no
        healthy = sum(1 for v, h in scan.metrics.get("grad_norm", []) if h.line_no < at and math.isfinite(v))
    if healthy < DIVERGED_AFTER:
        return None
    return (
        f"the run trained for {healthy} logged steps with finite values before the first NaN: it diverged (a learning rate too "
        "high for this model, fp16 overflow, or a bad batch); lower the learning rate, clip gradients (max_grad_norm), train in "
        "bf16 rather than fp16, and check the batch where it happened"
    )


#: Healthy logged steps before a NaN that make it a divergence rather than a failure from the start.
DIVERGED_AFTER = 3
