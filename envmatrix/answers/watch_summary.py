"""What a watch found, for people (Markdown: `--summary FILE.md`, a job summary, an issue body) and for programs
(`--format json`): the releases tried, what broke with its first bad release, evidence and remedy, the upgrade
order the runs support, and the vetted lock to stay on. A function of the Watch alone.

Text from elsewhere goes through the Markdown sink (outputs/sinks.py): evidence lines into code spans, messages
(an index's reason phrase, a bisection's, a remedy) escaped, so none can become a link, an image, HTML, a mention
or a broken table.
"""

from __future__ import annotations

from typing import Any

from packaging.version import Version

from ..outputs.drift import Comparison, against, brief
from ..outputs.sinks import md_code, md_text
from ..outputs.vetting import standings
from ..plan.cells import Environment
from ..records.outcomes import Outcome
from ..records.record import Record
from .watch import Watch, healthy


def _code(text: str) -> str:
    """A Markdown code span holding `text` on one line (at most 400 characters), whatever it contains."""
    return md_code(" ".join(text.split())[:400])


def pins(env: Environment) -> list[str]:
    """The environment as requirement pins (torch's build as its local tag)."""
    torch = f"torch=={env.torch}" + ("+cpu" if env.cuda == "none" else f"+{env.cuda_tag}")
    out = [torch, f"transformers=={env.transformers}"]
    if env.flash_attn != "none":
        out.append(f"flash-attn=={env.flash_attn}")
    return out + [f"{name}=={version}" for name, version in env.packages if version != "none"]


def _shown(record: Record) -> str:
    mark = "reproduced" if record.expect and healthy(record) else record.klass
    return f"{record.cell.scenario} {mark}"


def stay_on(w: Watch) -> tuple[str, bool]:
    """The baseline environment's id and whether its records vet it (every healthy scenario ok, every control reproduced)."""
    for standing in standings(list(w.baseline.values())):
        if standing.env == w.base.id:
            return w.base.id, bool(standing.vetted)
    return w.base.id, False


def markdown(w: Watch, *, reports: str) -> str:
    """The summary a user reads."""
    base = w.base
    lines = [f"# envmatrix watch: profile `{w.profile}` on {w.gpu}", ""]
    lines.append(f"Baseline: {', '.join(pins(base))} (Python {base.python}, {'CPU build' if base.cuda == 'none' else 'CUDA ' + base.cuda}).")
    lines.append("Baseline cells: " + ", ".join(_shown(r) for r in w.baseline.values()) + ".")
    if not w.baseline_healthy:
        lines.append("**The baseline itself does not train cleanly**: changes below are measured against what it shows.")
    lines += ["", "## Releases listed" if w.listed_only else "## Releases tried", ""]
    lines.append(
        "The host backend runs only the baseline (this interpreter): the releases beyond it are listed, not run; the venv or docker backend tries them."
        if w.listed_only
        else "Only the newest installable release of each axis was tried with everything else at the baseline, then all newest together; "
        "releases in between were tried only as bisection points where an outcome changed."
    )
    lines += [
        "",
        "| axis | baseline | newer releases | newest on the index | newest that installs on the baseline | outcome there |",
        "|---|---|---|---|---|---|",
    ]
    for a in w.axes:
        untried = "listed, not run (host backend)" if w.listed_only and a.newest else "no scenario depends on it"
        shown = ", ".join(_shown(r) for r in a.records.values()) or md_text(a.problem or untried)
        lines.append(f"| {a.axis} | {a.baseline} | {a.listed} | {a.latest or '-'} | {a.newest or '-'} | {shown} |")
    ruled = [f"{a.axis} {r}: {md_text(a.ruled_out[r])}" for a in w.axes for r in sorted(a.ruled_out, key=Version, reverse=True)[:3]]
    if ruled:
        lines += ["", "Ruled out before any run (catalog or package metadata), the newest three per axis:", *[f"- {r}" for r in ruled]]
    if w.all_newest_env is not None:
        lines += ["", f"All newest together ({', '.join(pins(w.all_newest_env))}): " + ", ".join(_shown(r) for r in w.all_newest.values()) + "."]
    lines += numbers(w)
    lines += ["", "## What broke", ""]
    if w.listed_only:
        lines.append("Nothing was tried beyond the baseline (host backend).")
    elif not w.broken:
        lines.append("Nothing: every newer release tried shows the baseline's outcomes.")
    for reg in w.regressions:
        expect = w.baseline[reg.scenario].expect
        verb = ("no longer shows " + expect if expect else "stops training") if reg.broke else "is fixed"
        at = w.base.axes().get(reg.axis) or w.base.package(reg.axis)
        lines.append(f"### {reg.axis}: {reg.scenario} {verb} ({reg.baseline_outcome} at {at}, {reg.newest_outcome} at {reg.newest})")
        lines.append("")
        b = reg.bisection
        if b is None:
            lines += ["Not bisected (one change per axis is bisected).", ""]
            continue
        if b.status == "found":
            lines.append(f"- first release where it changes: **{reg.axis} {b.first}** ({b.tried[str(b.first)]}); {b.before} before it shows {b.good}")
            for release, outcome in b.kinds[1:]:
                lines.append(f"- then {outcome} from {reg.axis} {release}")
        else:
            lines.append(f"- bisection {b.status}: {md_text(b.message)}")
        for release, _ in b.kinds or ([(b.first, "")] if b.first else []):
            record = reg.records.get(str(release))
            if record is not None:
                lines.append(f"- evidence at {release}: {_code(record.outcome.evidence)}")
                lines.append(f"- remedy: {md_text(record.outcome.remedy)}")
        lines.append(f"- bisection runs: {', '.join(f'{r}={o}' for r, o in b.tried.items())}")
        lines.append("")
    if w.orders:
        lines += ["## Upgrade order", ""]
        for order in w.orders:
            lines.append(f"- {order.axis} ({order.scenario}): {md_text(order.text)}")
            for moved, outcome in order.tried:
                lines.append(f"  - tried {', '.join(f'{k} {v}' for k, v in moved.items())} (others at baseline): {outcome}")
        lines.append("")
    env_id, vetted = stay_on(w)
    lines += ["## The lock to stay on", ""]
    lines.append(f"{'Vetted' if vetted else 'Not vetted'} ({len(w.baseline)} cells): `{' '.join(pins(w.base))}`")
    lines.append(f"Hashed lock: {md_code(f'envmatrix lock {env_id} --results {reports}/results')}")
    lines += ["", f"{w.ran} cells ran, {w.cached} were already recorded (cells are never run twice); {w.seconds} s. Records: {md_code(reports + '/results')}."]
    for note in w.notes:
        lines.append(f"Note: {md_text(note)}")
    return "\n".join(lines) + "\n"


def drift_rows(w: Watch) -> list[tuple[str, str, str, Comparison]]:
    """(where, release, scenario, comparison) for every tried cell that trained and whose fingerprint can be set
    against the baseline's cell of its scenario: each axis's newest, all newest together, the bisection's runs."""
    tried: list[tuple[str, str, dict[str, Record]]] = [(a.axis, a.newest or "", a.records) for a in w.axes]
    if w.all_newest_env is not None:
        tried.append(("all newest", " ".join(pins(w.all_newest_env)), w.all_newest))
    for reg in w.regressions:
        for release, record in reg.records.items():
            tried.append((reg.axis, release, {reg.scenario: record}))
    rows, seen = [], set()
    for where, release, records in tried:
        for scenario, record in records.items():
            base = w.baseline.get(scenario)
            if base is None or record.id in seen or record.klass != Outcome.OK:
                continue
            seen.add(record.id)
            if (c := against(base, record)) is not None:
                rows.append((where, release, scenario, c))
    return rows


def numbers(w: Watch) -> list[str]:
    """`## Numbers against your baseline`: whether each tried release that trains computes the baseline's numbers
    (docs/drift.md), and how to bisect one that does not."""
    rows = drift_rows(w)
    if not rows:
        return []
    lines = ["", "## Numbers against your baseline", ""]
    lines.append("Each release that trains is compared with your baseline on the same weights and teacher-forced inputs (fingerprint):")
    for where, release, scenario, c in rows:
        verdict = "trains; " + brief(c)
        lines.append(f"- {md_text(where)} {md_text(release)}, {md_text(scenario)}: {md_text(verdict)}")
        if c.drifts and where != "all newest":
            at = w.base.axes().get(where) or w.base.package(where)
            lines.append("  - bisect it: " + md_code(f"envmatrix bisect --axis {where} --good {at} --bad {release} --scenario {scenario} --drift"))
    return lines


def _record(record: Record) -> dict[str, Any]:
    return {"id": record.id, "class": record.klass, "expect": record.expect, "healthy": healthy(record), "evidence": record.outcome.evidence}


def as_json(w: Watch, *, reports: str) -> dict[str, Any]:
    """The same for programs."""
    env_id, vetted = stay_on(w)
    return {
        "profile": w.profile,
        "gpu": w.gpu,
        "baseline": {"env": w.base.id, "pins": pins(w.base), "cells": {s: _record(r) for s, r in w.baseline.items()}},
        "axes": [
            {
                "axis": a.axis,
                "baseline": a.baseline,
                "listed": a.listed,
                "newer": a.newer,
                "newest": a.newest,
                "latest": a.latest,
                "ruled_out": a.ruled_out,
                "problem": a.problem,
                "cells": {s: _record(r) for s, r in a.records.items()},
            }
            for a in w.axes
        ],
        "all_newest": {"env": w.all_newest_env.id, "cells": {s: _record(r) for s, r in w.all_newest.items()}} if w.all_newest_env else None,
        "regressions": [
            {
                "axis": r.axis,
                "scenario": r.scenario,
                "broke": r.broke,
                "baseline": r.baseline_outcome,
                "newest": r.newest,
                "newest_class": r.newest_outcome,
                "bisection": None
                if r.bisection is None
                else {
                    "status": r.bisection.status,
                    "message": r.bisection.message,
                    "first": r.bisection.first,
                    "before": r.bisection.before,
                    "kinds": r.bisection.kinds,
                    "tried": r.bisection.tried,
                    "skipped": r.bisection.skipped,
                },
                "records": {release: _record(rec) for release, rec in r.records.items()},
            }
            for r in w.regressions
        ],
        "orders": [
            {"axis": o.axis, "scenario": o.scenario, "text": o.text, "works": o.works, "tried": [{"moved": m, "class": c} for m, c in o.tried]}
            for o in w.orders
        ],
        "drift": [
            {"axis": where, "release": release, "scenario": scenario, "cell": c.record.id, "drifts": c.drifts, "text": brief(c)}
            for where, release, scenario, c in drift_rows(w)
        ],
        "stay_on": {"env": env_id, "vetted": vetted, "pins": pins(w.base), "lock": f"envmatrix lock {env_id} --results {reports}/results"},
        "runs": {"ran": w.ran, "cached": w.cached, "seconds": w.seconds, "results": f"{reports}/results"},
        "exit_code": w.exit_code(),
    }
