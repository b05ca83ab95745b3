"""Remedies that fit what the log shows, read from its structure: which two packages do not go together and over which
name, the range a package says it needs, the engine layer that raised, the library code and what it means, the GPU's
capability against what the run asked of it, a loss that diverged after healthy steps.

Each returns None where the log does not show enough, and the caller falls back to the outcome's own remedy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..facts import catalog, enginefailures, errorcodes
from ..facts.nameindex import canonical
from ..records.outcomes import Outcome
from ..records.record import Record
from .boundary import Boundary, of_stated
from .evidence import crossing, engine_layer, fallback, last_exception, ranges, strong
from .imports import read_missing
from .logscan import LogScan, scan_text
from .ranges import Range
from .rules import Judged


def _range_advice(stated: Range) -> str:
    """Install what the range says, or move the package that states it; the installed release where the statement names
    one (pkg_resources' `distribution was not found` names none)."""
    who = stated.said_by or "the package"
    install = f"install {stated.package} {stated.needed} (the range {who} states; "
    if not stated.found:
        return install + f"no installed release satisfies it), or move {who} to a release that supports the installed {stated.package}"
    return install + f"{stated.found} is installed), or move the package that states it to a release that supports {stated.found}"


def api_mismatch(scan: LogScan, installed: Mapping[str, str] | None = None) -> str | None:
    """Name both sides of the boundary (boundary.py): who called, what it asked of which package, what that package's
    installed release lacks; the stated range where a package said one."""
    judged = strong(scan, "api_mismatch") or last_exception(scan)
    stated: list[Range] = ranges(scan)
    advice = _range_advice(stated[0]) if stated else None
    if judged is None:
        return f"{advice}; in a matrix, the finding's axes say which releases" if advice else None
    crossed = of_scan(scan, judged, installed or {})
    if crossed is None:
        return f"{advice}; in a matrix, the finding's axes say which releases" if advice else None
    said = sentence(crossed, installed or {})
    if advice:
        said = f"{said.split(': ', 1)[0]}: {advice}"
    return said if installed else f"{said}; in a matrix, the finding's axes say which releases"


def of_scan(scan: LogScan, judged: Judged, installed: Mapping[str, str]) -> Boundary | None:
    """The boundary of a judged exception, with every distribution whose frames the log shows as its surroundings."""
    return crossing(scan, judged.raised, installed)


def of_mismatch(scan: LogScan, installed: Mapping[str, str] | None = None) -> Boundary | None:
    """The boundary of the API mismatch a log shows: its exception's, else the first range it states outside any
    exception (pip's resolver naming the package that requires another), else None."""
    judged = strong(scan, "api_mismatch")
    crossed = of_scan(scan, judged, installed or {}) if judged is not None else None
    if crossed is None and not scan.judged and (stated := ranges(scan)):
        return of_stated(stated[0])
    return crossed


def _side(b: Boundary, versions: Mapping[str, str]) -> str:
    """The caller as the sentence names it: `open-r1 (your code)`, `trl 0.19.1`, `trl`, or `the calling code`."""
    name = b.caller
    if name == "user":
        return b.who
    return f"{name} {versions[name]}" if name in versions else name or "the calling code"


_BASE = {"has": "have", "takes": "take", "allows": "allow"}


def _of(dist: str) -> str:
    """`transformers'`, `trl's`."""
    return f"{dist}'" if dist.endswith("s") else f"{dist}'s"


def sentence(b: Boundary, versions: Mapping[str, str], first_bad: str | None = None) -> str:
    """`trl 0.19.1 asks transformers' Qwen2ForCausalLM for `warnings_issued`, which transformers no longer has from 5.1.0:
    pin transformers < 5.1.0 or move trl to a release written for it`. `versions`: the environment's, where known;
    `first_bad`: the callee's first release that fails (bisect's), where known."""
    caller = _side(b, versions)
    who = b.who or "the calling code"
    if b.kind in ("import_name", "submodule", "dropped"):
        owner = b.name
    elif b.callee:
        owner = f"{_of(b.callee_who)} {b.name}"
    else:
        owner = b.name + (f" (defined by {', '.join(b.candidates)}: the log does not say which)" if b.candidates else "")
    call = "()" if b.callee and not owner.endswith("()") else ""
    match b.kind:
        case "attribute":
            ask, verb = f"{caller} asks {owner} for `{b.member}`", "has"
        case "keyword" if b.member:
            ask, verb = f"{caller} passes the keyword `{b.member}` to {owner}{call}", "takes"
        case "keyword" | "positional":
            ask, verb = f"{caller} calls {owner}{call} with arguments", "takes"
        case "import_name":
            ask, verb = f"{caller} imports `{b.member}` from {owner}", "has"
        case "range":
            ask, verb = f"{caller} needs {b.name}{b.member}", "has"
        case "dropped":
            ask, verb = f"{caller} uses {owner} as an earlier release allowed (`{b.member}`)", "allows"
        case "default":
            ask, verb = f"{caller} calls {owner}() relying on its earlier default for `{b.member}`", "has"
        case _:
            ask, verb = f"{caller} imports the module {b.member}", "has"
    if not b.callee:
        move = f"update {who} to" if b.caller == "user" else f"move {who} to a release written for"
        fix = f"install the release of the package that defines {b.name} that {who} was written for, or {move} the installed one"
        return f"{ask}, which the installed release does not {_BASE[verb]}: {fix}"
    callee = b.callee
    if callee == "user":  # a library calls back into a class of the user's (or the model's remote code)
        return (
            f"{ask}, which your code does not {_BASE[verb]}: update that class (or the model's remote code, a revision written for "
            f"the installed {b.caller}) to what {b.caller} now expects, or install the {b.caller} release it was written for"
        )
    if first_bad:
        lack = f"which {callee} no longer {verb} from {first_bad}"
        fix = f"pin {callee} < {first_bad} or move {who} to a release written for it"
    else:
        installed = f"{callee} {versions[callee]}" if callee in versions else f"the installed {callee}"
        lack = f"which {installed} does not {_BASE[verb]}"
        fix = (
            f"install the {callee} release {who} was written for, or "
            + (f"update {who} to the installed {callee}" if b.caller == "user" else f"move {who} to a release written for the installed {callee}")
            + " (its changelog or requirements name the range)"
        )
    return f"{ask}, {lack}: {fix}"


def engine(scan: LogScan) -> str | None:
    """A new failure inside an engine: that layer's own remedy."""
    judged = fallback(scan) or last_exception(scan)
    layer = engine_layer(judged) if judged is not None else None
    if layer is None and (start := scan.hits.get("notice:engine_start")) is not None:
        layer = enginefailures.layer_named(start.line)
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
    if cc is None:  # a refusal that names what it cannot run but not the GPU (`Your setup doesn't support bf16/gpu`)
        named = [(need, why) for need, (_, why) in catalog.NEEDS.items() if re.search(_need_word(need), text, re.I)]
        if not named:
            return None
        said = "; ".join(f"{why}: {_INSTEAD[need]}" for need, why in named)
        return f"this GPU, or this torch and CUDA, cannot run what was asked; {said}; or run on a newer GPU with a torch built for its CUDA"
    lacking = [(need, why) for need, (needed, why) in catalog.NEEDS.items() if cc < needed and re.search(_need_word(need), text, re.I)]
    lacking = lacking or [(need, why) for need, (needed, why) in catalog.NEEDS.items() if cc < needed][:2]
    if not lacking:
        return None
    said = "; ".join(f"{why}: {_INSTEAD[need]}" for need, why in lacking)
    return f"this GPU has compute capability {cc[0]}.{cc[1]}; {said}; or run on a newer GPU"


_INSTEAD = {"bf16": "train in fp16 (with loss scaling) or fp32", "FlashAttention-2": "use attn_implementation='sdpa'",
            "FlashAttention-3": "use FlashAttention-2 or sdpa", "fp8": "train in bf16 or fp16"}  # fmt: skip


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
    reported = scan.nonfinite or scan.first("nan_loss")  # a value, else a trainer's notice (`grad norm is not finite`)
    if not metrics and reported is not None:
        at = reported.line_no
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


#: The largest cell log read whole for its boundary (a bigger one is read from the tail its record keeps).
LOG_BYTES = 64 << 20


def freeze_versions(freeze: Iterable[str]) -> dict[str, str]:
    """`name==version` freeze lines as distribution -> version (names as the name index spells them)."""
    out: dict[str, str] = {}
    for line in freeze:
        name, sep, version = line.partition("==")
        if sep and name.strip() and version.strip():
            out[canonical(name.strip())] = version.strip()
    return out


def of_log(text: str | bytes, installed: Mapping[str, str] | None = None) -> Boundary | None:
    """The boundary of the API mismatch a whole log shows (a matrix cell's, for watch and bisect), or None."""
    return of_mismatch(scan_text(text), installed)


def _log_of(record: Record) -> str | bytes:
    """A cell's whole log where the file is still there (and not too large), else the tail the record keeps."""
    path = Path(record.log.path) if record.log.path else None
    if path is not None and path.is_file() and path.stat().st_size <= LOG_BYTES:
        return path.read_bytes()
    return record.log.tail


def of_record(record: Record) -> Boundary | None:
    """The boundary of the API mismatch a cell's record shows (its log, `_log_of`); the cell's own freeze resolves a name
    several packages define."""
    if record.outcome.outcome != "api_mismatch":
        return None
    return of_log(_log_of(record), freeze_versions(record.build.pins() if record.build else ()))


def culprit(record: Record) -> str:
    """The installed package whose code failed against the others in a cell, as the verdict reads it ('' where it names
    none): the caller of an API mismatch's boundary, or the package that imports a module no longer installed (trl
    importing `requests`, which a newer transformers stopped bringing along). What an upgrade order moves next."""
    crossed = of_record(record)
    if crossed is not None:
        return crossed.caller if crossed.crossed and crossed.caller != "user" else ""
    if record.outcome.outcome != "missing_module":
        return ""
    scan = scan_text(_log_of(record))
    hit = scan.first(Outcome.MISSING_MODULE)
    missing = read_missing(hit.line, hit.context) if hit is not None else None
    return missing.importer if missing is not None and missing.importer and missing.package else ""
