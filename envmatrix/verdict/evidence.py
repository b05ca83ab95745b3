"""Evidence from a log read as structure: the exceptions the rules named, the library codes found, a package's own
statement of the range it supports; quoted for a verdict, and shown as `facts` so a user sees why.

Pure functions over a LogScan (logscan.py) and the rules' judgements (rules.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..facts import enginefailures, errorcodes
from . import boundary
from .logscan import LogScan
from .ranges import Range, read_range
from .rules import Judged
from .tracebacks import Raised, looked_through


def ranges(scan: LogScan) -> list[Range]:
    """Range statements the log makes: on their own line (a warning) or in an exception's message."""
    out: list[Range] = []
    hit = scan.hits.get("evidence:range")
    texts = ([hit.line] if hit else []) + [j.raised.value for j in scan.judged if j.outcome == "api_mismatch"]
    for text in texts:
        found = read_range(text)
        if found is not None and all(found.text() != o.text() for o in out):  # one statement, whichever line carried it
            out.append(found)
    return out


def _where(raised: Raised) -> str:
    """`raised in deepspeed (deepspeed.runtime.engine.no_sync), called from transformers`."""
    frame = next((f for f in reversed(raised.frames) if not looked_through(f)), None)
    if frame is None:
        return ""
    place = f"raised in {raised.package or 'your code'} ({frame.where()})"
    caller = raised.caller
    return place + (f", called from {'your code' if caller == 'user' else caller}" if caller else "")


def crossing(scan: LogScan | None, raised: Raised, installed: Mapping[str, str] | None = None) -> boundary.Boundary | None:
    """The boundary of an exception in a log (boundary.py), with what the rest of the log shows around it: the
    distributions of every frame printed, the packages it states (versions listed, imports, launchers). The one place a
    log's boundary is read: the evidence, the facts, the remedy, watch and bisect all agree."""
    if scan is None:
        return boundary.of(raised, installed=installed or {})
    around = [f.package for j in scan.judged for f in j.raised.frames if f.package not in ("", "python")]
    return boundary.of(_rewrapped(scan, raised), installed=installed or {}, around=around, stated=scan.stated, calls=scan.shown)


def _rewrapped(scan: LogScan, raised: Raised) -> Raised:
    """An exception printed without frames inside a wrapper's message, on the line after the wrapper's traceback
    (torch.compile's `BackendCompilerFailed: backend='inductor' raised:` over `LoweringException: ImportError: cannot import
    name 'x' from 'triton…'`), where the wrapper's last frame imports that very name: the wrapper caught it there, so its
    frames are the exception's. Otherwise the exception as it is."""
    if raised.frames:
        return raised
    before = [j.raised for j in scan.judged if j.raised.line_no < raised.line_no]
    if not before or not before[-1].frames or raised.line_no - before[-1].line_no > 2:
        return raised
    match = re.match(r"cannot import name ['‘’]?(\w+)", raised.value)
    if match is None or not re.search(rf"\bimport\b[^\n]*\b{match.group(1)}\b", before[-1].source):
        return raised
    return replace(raised, frames=before[-1].frames, source=before[-1].source)


def _across(raised: Raised, scan: LogScan | None) -> str:
    """`trl calls transformers' Trainer.__init__` / `vllm asks transformers for Qwen2Tokenizer.x` / `peft imports from
    transformers`: the boundary an API mismatch crossed, both sides named (boundary.py); '' where it names none."""
    crossed = crossing(scan, raised)
    if crossed is None or not crossed.crossed:
        return ""
    caller = crossed.who
    verb = {"attribute": "asks", "import_name": "imports from", "submodule": "imports from", "range": "requires", "dropped": "uses"}.get(crossed.kind, "calls")
    return f"caller {caller}, callee {crossed.callee_who}: {caller} {verb} {crossed.callee_who}"


def quote(judged: Judged, scan: LogScan | None = None) -> str:
    """`line 12: RuntimeError: … (raised in vllm (vllm.engine.step), called from trl; rule api_mismatch:attribute)`;
    `scan`: the log it is in, whose statements may name a caller the exception's frames do not print."""
    raised = judged.raised
    where = (_across(raised, scan) if judged.outcome == "api_mismatch" else "") or _where(raised)
    codes = ", ".join(c.describe() for c in errorcodes.find(raised.value))
    detail = "; ".join(x for x in (where, codes) if x)
    return f"line {raised.line_no}: {raised.line}" + (f" ({detail})" if detail else "")


def strong(scan: LogScan, outcome: str) -> Judged | None:
    """The first exception a specific rule named this outcome (teardown noise and fallbacks left out); the first with frames
    where an earlier one has none (a user quotes the exception line, then pastes its traceback: the frames name the caller)."""
    named = [j for j in scan.judged if j.outcome == outcome and not j.fallback]
    return next((j for j in named if j.raised.frames), named[0] if named else None)


def code_of(scan: LogScan, outcome: str) -> tuple[errorcodes.Code, str] | None:
    """The first library code found in the log that means this outcome, with the line that printed it."""
    return next(((code, hit.quote()) for code, hit in scan.codes if code.outcome == outcome), None)


def structural(scan: LogScan, outcome: str) -> str | None:
    """Evidence of an outcome from structure: an exception a rule named so, else a library code that means it."""
    judged = strong(scan, outcome)
    if judged is not None:
        return quote(judged)
    found = code_of(scan, outcome)
    if found is not None:
        code, line = found
        return f"{line} ({code.describe()})"
    return None


def fallback(scan: LogScan) -> Judged | None:
    """An exception only a fallback rule named (a new failure in an engine's frames), for when nothing else explains the run."""
    return next((j for j in reversed(scan.judged) if j.fallback and j.outcome != "error"), None)


def last_exception(scan: LogScan) -> Judged | None:
    """The last exception that is not teardown noise: usually the one that ended the run (a traceback cut before its
    exception line only where there is no other)."""
    kept = [j for j in scan.judged if not j.raised.ignored]
    return next((j for j in reversed(kept) if not j.raised.truncated), kept[-1] if kept else None)


def engine_layer(judged: Judged) -> enginefailures.Layer | None:
    """The engine layer an exception came from: its raising frame's module, else the engine its message names."""
    raised = judged.raised
    module = next((f.module for f in reversed(raised.frames) if f.package == raised.package), "")
    return enginefailures.layer_of(module) if module else enginefailures.layer_named(raised.value)


def facts(scan: LogScan) -> dict[str, Any]:
    """What the verdict stood on, for `classify --format json`: each exception (type, message, raising and calling package,
    raising frame, the rule that named it), the library codes, the range statements."""
    exceptions = []
    for judged in scan.judged[-8:]:
        raised = judged.raised
        frame = raised.raising
        exceptions.append(
            {
                "line": raised.line_no,
                "type": raised.type + (f"({raised.inner})" if raised.inner else ""),
                "message": raised.value.split("\n", 1)[0][:300],
                "raising_package": raised.package or ("your code" if raised.frames else None),
                "caller_package": ("your code" if raised.caller == "user" else raised.caller) or None,
                "raising_frame": frame.where() if frame else None,
                "frames": len(raised.frames),
                "stream": raised.stream or None,
                "ignored": raised.ignored,
                "class": judged.outcome,
                "rule": judged.variant,
            }
            | ({"boundary": crossed.as_dict()} if (crossed := crossing(scan, raised)) is not None else {})
        )
    return {
        "exceptions": exceptions,
        "codes": [
            {"family": errorcodes.FAMILIES[c.family], "number": c.number, "name": c.name, "message": c.messages[0] if c.messages else None}
            | {"class": c.outcome, "line": hit.line_no}
            for c, hit in scan.codes
        ],
        "ranges": [r.text() for r in ranges(scan)],
    }
