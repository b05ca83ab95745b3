"""`envmatrix watch --propose FILE`, the pure part: from what a watch found, the releases to move the team's file to,
each standing on runs, in the order the summary gives; and the proposal said in Markdown (a pull request's body).

- every axis at its newest, where all newest together ran and every cell showed what it should;
- else, step by step as the summary's upgrade order says: each axis whose newest trains on the baseline alone moves to
  it; an axis whose newest breaks moves with the other axes of the order's try that trained, where one did; else to the
  last release before its first bad one, where bisection found it and it is newer than the baseline;
- nothing else moves. Moves that each ran alone but not together are said to be so.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..errors import printable
from ..outputs.sinks import md_code, md_text, terminal
from ..records.outcomes import Outcome
from .watch import Watch, healthy

#: A watch axis as the distribution a team's file pins.
DISTRIBUTION = {"flash_attn": "flash-attn"}


@dataclass(frozen=True)
class Move:
    """One pin to move: from the baseline to a release, and the runs that say it trains."""

    axis: str
    old: str
    new: str
    why: str

    @property
    def distribution(self) -> str:
        return DISTRIBUTION.get(self.axis, self.axis)


@dataclass
class Plan:
    """The moves, whether they ran together, and what could not be proposed."""

    moves: list[Move] = field(default_factory=list)
    together: bool = False  # the moved combination itself ran (all newest together, or one try of the order)
    notes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.moves


def _newer(a: str, b: str) -> bool:
    try:
        return Version(a) > Version(b)
    except InvalidVersion:
        return False


def plan(w: Watch) -> Plan:
    """The releases to move to, from the watch's own runs."""
    out = Plan()
    baseline = {**w.base.axes(), **dict(w.base.packages)}
    if w.listed_only:
        out.notes.append("the host backend only lists newer releases: nothing ran beyond the baseline, nothing is proposed")
        return out
    env = w.all_newest_env
    if env is not None and w.all_newest and all(healthy(r) for r in w.all_newest.values()):
        newest = {**env.axes(), **dict(env.packages)}
        moves = [Move(a, baseline[a], v, "all newest together: every cell showed what it should") for a, v in newest.items() if v != baseline.get(a)]
        if moves:
            out.moves, out.together = moves, True
            return out
    broken = {r.axis for r in w.broken}
    chosen: dict[str, Move] = {}
    for a in w.axes:
        if a.axis in broken or not a.newest or not a.records or not all(healthy(r) for r in a.records.values()):
            continue
        chosen[a.axis] = Move(
            a.axis, a.baseline, a.newest, f"{a.axis} {a.newest} on the baseline: " + ", ".join(f"{s} {r.klass}" for s, r in a.records.items())
        )
    for order in w.orders:
        trained = sorted((moved for moved, klass in order.tried if klass == Outcome.OK), key=len)
        if order.works and trained:
            for axis, release in trained[0].items():
                chosen[axis] = Move(axis, baseline.get(axis, "none"), release, f"the upgrade order: {printable(order.text)}")
            continue
        reg = next((r for r in w.broken if r.axis == order.axis), None)
        b = reg.bisection if reg else None
        if b is not None and b.status == "found" and b.before and _newer(b.before, baseline.get(order.axis, "0")):
            chosen[order.axis] = Move(
                order.axis, baseline[order.axis], b.before, f"the last release before the first bad one ({order.axis} {b.first}: {b.tried.get(str(b.first))})"
            )
        else:
            out.notes.append(f"{order.axis}: no release beyond the baseline trains {order.scenario}; it stays at {baseline.get(order.axis)}")
    out.moves = [m for m in chosen.values() if m.new != m.old]
    out.together = len(out.moves) == 1
    if len(out.moves) > 1:
        out.notes.append("each move ran on the baseline alone (or in its order's try), not all together: the pull request's own CI runs them together")
    return out


def markdown(p: Plan, file: str, moved: dict[str, tuple[str, str]], left: list[str], diff: str) -> str:
    """The proposal for a pull request's body (appended to the watch summary, which holds the evidence). Every text goes
    through the Markdown sinks (outputs/sinks.py); the diff is a fenced block no line of the file can close."""
    lines = ["## Proposed change", ""]
    if not moved:
        lines.append(f"Nothing can be proposed for {md_code(file)}." + (" " + " ".join(md_text(n) for n in p.notes) if p.notes else ""))
        lines += [f"- not moved: {md_text(x)}" for x in left]
        return "\n".join(lines) + "\n"
    lines.append(f"{md_code(file)} moved to the newest combination the runs support ({'it ran as a whole' if p.together else 'see the note'}):")
    lines.append("")
    for m in p.moves:
        if m.distribution in moved or m.axis in moved:
            old, new = moved.get(m.distribution) or moved[m.axis]
            lines.append(f"- {md_text(m.distribution)}: {md_text(old)} → {md_text(new)} ({md_text(m.why)})")
    lines += [f"- not moved: {md_text(x)}" for x in left]
    lines += [f"- note: {md_text(x)}" for x in p.notes]
    shown = terminal(diff.rstrip("\n"), keep_newlines=True)  # control bytes of the file shown, never acted on
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    fence = "`" * max(3, longest + 1)  # the file's own text cannot close the block
    lines += ["", f"{fence}diff", shown, fence, ""]
    return "\n".join(lines) + "\n"


# ---- the files ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Written:
    """What --propose found: the proposed file and its diff (to write beside the summary), and the Markdown."""

    files: list[tuple[Path, str]]
    diff: str
    text: str
    moved: dict[str, tuple[str, str]]

    @property
    def proposed(self) -> Path | None:
        return self.files[0][0] if self.files else None


def lookup(name: str, version: str) -> list[tuple[str, str]]:
    """A release's files (URL, sha256) from the indexes pip is set to use, as `envmatrix lock` looks them up."""
    from ..host.pipconfig import read_pip_settings
    from ..outputs.lock import pip_report
    from ..records.record import BuildFacts

    mine = read_pip_settings()
    build = BuildFacts(index_url=mine.index_url, extra_index_urls=mine.extra_index_urls, find_links=mine.find_links)
    return [(e["url"], e["sha256"]) for e in pip_report([f"{name}=={version}"], build)]


def proposed_path(file: Path, reports: Path) -> Path:
    """REPORTS/proposed/<the file's name>: beside the summary."""
    return reports / "proposed" / file.name


def proposal(file: Path, w: Watch, reports: Path) -> Written:
    """The team's file moved as the plan says (nothing written yet: the caller writes `files` after the answer is out)."""
    from ..stack import read_stack
    from ..stack.propose import propose

    p = plan(w)
    moves = {m.distribution: m.new for m in p.moves}
    done = propose(file, read_stack(file), moves, lookup) if moves else None
    moved = done.moved if done else {}
    if done is None or not moved:
        return Written([], "", markdown(p, str(file), {}, done.left if done else [], ""), {})
    original = file.read_bytes().decode("utf-8")
    diff = "".join(difflib.unified_diff(original.splitlines(keepends=True), done.text.splitlines(keepends=True), f"a/{file.name}", f"b/{file.name}"))
    target = proposed_path(file, reports)
    return Written([(target, done.text), (target.with_name(f"{file.name}.diff"), diff)], diff, markdown(p, str(file), moved, done.left, diff), moved)
