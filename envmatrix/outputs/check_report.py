"""What `envmatrix check` found, said three ways: text for people, JSON for programs, and SARIF 2.1.0 so GitHub code
scanning annotates the very line of requirements.txt (or the lock) that pins the bad release.

SARIF's shape is OASIS's (https://docs.oasis-open.org/sarif/sarif/v2.1.0/); tests validate the output against the
schema committed under tests/data/sarif/. Text from records (evidence, remedies) is made printable before a terminal
sees it; in SARIF it is JSON-escaped data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .. import __version__
from ..answers.check import Answer
from ..errors import printable

SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

#: Each kind of answer as a SARIF rule: its id, level and short description.
RULES = {
    "known-bad": ("error", "A finding of the kept table covers a release this file pins"),
    "declared-incompatible": ("error", "A pinned release's own metadata, or the catalog, rules this stack out"),
    "never-run": ("note", "No environment that ran matches this stack: the nearest ones are named"),
}

_WHERE = re.compile(r"^(?P<path>.+?):(?P<line>[0-9]+)(?:\s.*)?$")


def location(where: str, root: Path | None = None) -> dict[str, Any] | None:
    """A SARIF physicalLocation from `path:line` (as the stack readers say where a pin is); None without a line."""
    found = _WHERE.match(where)
    if not found:
        return None
    path = Path(found.group("path"))
    base = root or Path.cwd()
    try:
        rel = os.path.relpath(path.resolve(), base.resolve()) if path.is_absolute() or path.exists() else str(path)
    except ValueError:
        rel = str(path)
    uri = quote(Path(rel).as_posix(), safe="/")  # a URI reference: a space or a '#' in a file name is escaped
    return {"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": int(found.group("line"))}}}


def _result(rule: str, text: str, where: list[str], props: dict[str, Any], root: Path | None) -> dict[str, Any]:
    locations = [loc for w in where if (loc := location(w, root)) is not None]
    out: dict[str, Any] = {"ruleId": rule, "level": RULES[rule][0], "message": {"text": text}}
    if locations:
        out["locations"] = locations[:1]
        if len(locations) > 1:
            out["relatedLocations"] = [{"id": i, **loc} for i, loc in enumerate(locations[1:], 1)]
    out["properties"] = props
    return out


def sarif(a: Answer, root: Path | None = None) -> dict[str, Any]:
    """The answer as one SARIF run: a result per known-bad finding, per declared incompatibility, and one note when the
    stack never ran (pointing at its torch and transformers lines)."""
    results = []
    for k in a.known_bad:
        text = f"known bad on {a.gpu}: {k.span}"
        if k.first_bad:
            text += f"; first bad release {k.first_bad}"
        if k.fixed_in:
            text += f"; fixed in {k.fixed_in}"
        text += f". Evidence ({k.cell}): {k.evidence}. Remedy: {k.remedy}. {k.signer}."
        results.append(_result("known-bad", text, list(k.where), k.as_dict(), root))
    for d in a.declared:
        results.append(_result("declared-incompatible", f"declared incompatible: {d.reason}", [d.where], d.as_dict(), root))
    if a.never_run:
        near = "; ".join(f"{n.env} ({', '.join(n.differs) or 'same axes'}; {'vetted' if n.vetted else 'not vetted'})" for n in a.nearest)
        text = f"never run on {a.gpu}: no environment in the records matches this stack" + (f"; nearest: {near}" if near else "")
        lines = [a.stack_lines[x] for x in ("transformers", "torch") if x in a.stack_lines]
        results.append(_result("never-run", text, lines, {"nearest": [n.as_dict() for n in a.nearest]}, root))
    rules = [{"id": rid, "shortDescription": {"text": desc}, "defaultConfiguration": {"level": level}} for rid, (level, desc) in RULES.items()]
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {"driver": {"name": "envmatrix", "version": __version__, "rules": rules}},
                "results": results,
                "properties": {"gpu": a.gpu, "records": a.records, "stack": a.source},
            }
        ],
    }


def text(a: Answer) -> str:
    """The answer for a terminal."""
    lines = [f"envmatrix check: {printable(a.source)} on {a.gpu} ({a.records} records)"]
    for k in a.known_bad:
        lines.append(f"KNOWN BAD {printable(', '.join(k.where) or a.source)}: {printable(k.span)}")
        if k.first_bad or k.fixed_in:
            lines.append(
                "  " + "; ".join(x for x in (f"first bad release {k.first_bad}" if k.first_bad else "", f"fixed in {k.fixed_in}" if k.fixed_in else "") if x)
            )
        if k.admits:
            lines.append("  your range admits the bad release: pin outside it")
        lines.append(f"  evidence ({k.cell}): {printable(k.evidence)}")
        lines.append(f"  remedy: {printable(k.remedy)}")
        lines.append(f"  {printable(k.signer)}")
    for d in a.declared:
        lines.append(f"DECLARED INCOMPATIBLE {printable(d.where)}: {printable(d.reason)} ({d.source})")
    for v in a.vetted:
        if v.vetted:
            lines.append(f"VETTED {v.env}: vetted for {', '.join(v.scenarios)}; controls {v.controls} reproduced; {printable(v.signed)}")
            if v.fails:
                lines.append(f"  fails there: {', '.join(v.fails)}")
        else:
            lines.append(f"RAN, NOT VETTED {v.env}: {printable(v.why_not)}" + (f"; fails {', '.join(v.fails)}" if v.fails else ""))
    if a.never_run:
        lines.append(
            f"NEVER RUN: no environment on {a.gpu} in the records is vetted for this stack"
            if a.vetted
            else f"NEVER RUN: no environment on {a.gpu} in the records matches this stack"
        )
        for n in a.nearest:
            shown = f"vetted for {', '.join(n.scenarios)}" if n.vetted else "not vetted" + (f" (fails {', '.join(n.fails)})" if n.fails else "")
            lines.append(f"  nearest: {n.env}: differs in {', '.join(n.differs) or 'nothing the stack pins'}; {shown}")
    for note in a.notes:
        lines.append(f"note: {printable(note)}")
    code = a.exit_code()
    lines.append("nothing known is bad" if code == 0 else f"{len(a.known_bad)} known bad, {len(a.declared)} declared incompatible")
    return "\n".join(lines) + "\n"
