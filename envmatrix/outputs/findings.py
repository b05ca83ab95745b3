"""Pure: what differs between environments, and why, from the records alone.

A table of colours answers "what differs" only to a careful reader; this module says it in words. It
groups non-control cells by (scenario, GPU), finds the groups whose outcome is not the same
everywhere, and names the environment axes whose values separate the outcomes
("frozen-emb-reentrant: grad_lost on transformers 4.51.3, 4.57.6; ok on 5.23.0"). Controls are
summarised apart: a reproduced control is good news, one that did not reproduce is a broken detector.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..records.outcomes import Outcome
from ..records.record import Record, Status
from ..verdict.imports import read_missing

#: Outcomes that say nothing about the stack's training behaviour.
QUIET = (Outcome.SKIPPED,)


def version_order(value: str) -> tuple[int, Version, str]:
    """Versions in release order; anything else (gpu names, `none`) after, alphabetically."""
    try:
        return (0, Version(value), "")
    except InvalidVersion:
        return (1, Version("0"), value)


def sort_values(values: Iterable[str]) -> list[str]:
    """Axis values in a human order: 4.9 before 4.51."""
    return sorted(set(values), key=version_order)


@dataclass(frozen=True)
class Side:
    """One outcome of a split, the values of the explaining axis that show it (one axis), or where it
    shows in words (several axes: `with trl 0.19.1 and transformers ≥ 5.1.0`)."""

    outcome: str
    values: tuple[str, ...]
    cells: tuple[str, ...]
    where: str = ""


@dataclass(frozen=True)
class Finding:
    """A scenario whose outcome differs between environments on one GPU type (or fails everywhere)."""

    scenario: str
    gpu: str
    axes: tuple[str, ...]  # the fewest axes whose values separate the outcomes; () when no 1-3 axes do
    sides: tuple[Side, ...]  # failing outcomes first, ok last
    example: Record  # one failing cell: its evidence and remedy explain the finding
    everywhere: bool = False  # the scenario fails the same way in every environment tried
    note: str = ""  # what other environments show about the cause (where a missing module was installed)

    @property
    def axis(self) -> str | None:
        """The one axis that separates the outcomes, where one does."""
        return self.axes[0] if len(self.axes) == 1 else None

    @property
    def text(self) -> str:
        """One line: `scenario (gpu): grad_lost on transformers 4.51.3, 4.57.6; ok on 5.23.0`, or, where it
        takes several axes, `error with trl 0.19.1 and transformers ≥ 5.1.0; ok otherwise`."""
        head = f"{self.scenario} ({self.gpu})"
        if self.everywhere:
            return f"{head}: {self.sides[0].outcome} in every environment tried ({len(self.sides[0].cells)})"
        parts = []
        for i, side in enumerate(self.sides):
            if side.where:
                parts.append(f"{side.outcome} {side.where}")
            elif self.axis:
                label = f"{self.axis} " if i == 0 else ""
                parts.append(f"{side.outcome} on {label}{', '.join(side.values)}")
            else:
                parts.append(f"{side.outcome} on {len(side.cells)} environment{'s' if len(side.cells) > 1 else ''}")
        return f"{head}: " + "; ".join(parts)


@dataclass(frozen=True)
class Change:
    """A cell whose outcome differs from an earlier run's record of the same cell."""

    cell: str
    before: str
    after: str
    record: Record

    @property
    def text(self) -> str:
        return f"changed: {self.cell}: {self.before} → {self.after}"


@dataclass(frozen=True)
class Controls:
    """How many controls ran, and those that did not reproduce their expected failure."""

    total: int
    failed: tuple[Record, ...]

    @property
    def reproduced(self) -> int:
        return self.total - len(self.failed)

    @property
    def text(self) -> str:
        if not self.total:
            return "no controls ran"
        return f"{self.reproduced}/{self.total} controls reproduced"


@dataclass(frozen=True)
class Findings:
    """Everything the reader should see before the table."""

    changes: tuple[Change, ...]
    findings: tuple[Finding, ...]
    controls: Controls


def _ran(records: Iterable[Record]) -> list[Record]:
    return [r for r in records if r.status not in (Status.SKIPPED, Status.COVERED) and r.klass not in QUIET]  # a covered cell's finding is its coverer's


#: At most this many axes explain a finding: a combination of more says nothing a reader can act on.
MAX_AXES = 3


def _values(r: Record) -> dict[str, str]:
    """Every axis of a record's cell: the environment axes and its package axes (`none`: not installed)."""
    return {**r.cell.axes(), **r.cell.packages}


def explaining_axes(recs: list[Record]) -> tuple[str, ...]:
    """The fewest varying axes (package axes included) whose values determine the outcome, at most MAX_AXES;
    among as few, the one with the fewest distinct value combinations (the simplest story), then axis order."""
    values = [_values(r) for r in recs]
    names = list(dict.fromkeys(k for v in values for k in v))
    varying = [a for a in names if len({v.get(a, "none") for v in values}) > 1]
    for k in range(1, min(MAX_AXES, len(varying)) + 1):
        found = []
        for combo in itertools.combinations(varying, k):
            seen: dict[tuple[str, ...], str] = {}
            if all(seen.setdefault(tuple(v.get(a, "none") for a in combo), r.klass) == r.klass for v, r in zip(values, recs, strict=True)):
                found.append((len(seen), [varying.index(a) for a in combo], combo))
        if found:
            return min(found)[2]
    return ()


def describe(axis: str, chosen: set[str], tried: set[str]) -> str:
    """`transformers ≥ 5.1.0` where the chosen values are the newest of those tried (two or more of them),
    `≤` for the oldest, else the values themselves."""
    order = sort_values(tried)
    picked = [v for v in order if v in chosen]
    versions = all(version_order(v)[0] == 0 for v in order)
    if versions and len(picked) >= 2 and len(picked) < len(order):
        if order[-len(picked) :] == picked:
            return f"{axis} ≥ {picked[0]}"
        if order[: len(picked)] == picked:
            return f"{axis} ≤ {picked[-1]}"
    return f"{axis} {', '.join(picked)}"


def where(side: list[Record], recs: list[Record], axes: tuple[str, ...]) -> str:
    """A failing side in words over several axes: the values of each axis it shows, when every cell with
    all of those values shows this outcome (`with trl 0.19.1 and transformers ≥ 5.1.0`); else its cells'
    combinations. A package left at `none` (not pinned) is not named where the rest already say it exactly."""
    values = [_values(r) for r in recs]
    tried = {a: {v.get(a, "none") for v in values} for a in axes}
    chosen = {a: {_values(r).get(a, "none") for r in side} for a in axes}

    def exact(subset: list[str]) -> bool:
        matching = [r for v, r in zip(values, recs, strict=True) if all(v.get(a, "none") in chosen[a] for a in subset)]
        return all(r.klass == side[0].klass for r in matching)

    named = [a for a in axes if chosen[a] != tried[a]]
    if exact(named):
        for a in [a for a in named if chosen[a] == {"none"} and any(a in r.cell.packages for r in side)]:
            if exact([b for b in named if b != a]):
                named.remove(a)
        return "with " + " and ".join(describe(a, chosen[a], tried[a]) for a in named)
    combos = sorted({", ".join(f"{a} {_values(r).get(a, 'none')}" for a in axes) for r in side})
    return "with " + "; ".join(f"({c})" for c in combos)


def _finding(scenario: str, gpu: str, recs: list[Record]) -> Finding | None:
    outcomes = {r.klass for r in recs}
    failing = sorted((r for r in recs if r.klass != Outcome.OK), key=lambda r: r.id)
    if not failing:
        return None
    if len(outcomes) == 1:
        side = Side(failing[0].klass, (), tuple(r.id for r in failing))
        return Finding(scenario, gpu, (), (side,), failing[0], everywhere=True)
    axes = explaining_axes(recs)
    by_outcome: dict[str, list[Record]] = defaultdict(list)
    for r in recs:
        by_outcome[r.klass].append(r)
    order = sorted(by_outcome, key=lambda o: (o == Outcome.OK, o))
    sides = []
    for outcome in order:
        mine = by_outcome[outcome]
        values = tuple(sort_values(_values(r)[axes[0]] for r in mine)) if len(axes) == 1 else ()
        text = ""
        if len(axes) > 1:
            text = "otherwise" if outcome == Outcome.OK else where(mine, recs, axes)  # the failing sides are each named
        sides.append(Side(outcome, values, tuple(sorted(r.id for r in mine)), text))
    return Finding(scenario, gpu, axes, tuple(sides), failing[0], note=installed_elsewhere(failing[0], recs))


def installed_elsewhere(failed: Record, recs: list[Record]) -> str:
    """For a missing module: where another environment's freeze had its distribution, and what differs
    there (the cause is in what brought it), preferring an environment where the scenario was ok."""
    if failed.klass != Outcome.MISSING_MODULE:
        return ""
    missing = read_missing(failed.outcome.evidence)
    if missing is None:
        return ""
    dist = canonicalize_name(missing.install)
    here, mine = _values(failed), _pins(failed)
    for r in sorted(recs, key=lambda r: (r.klass != Outcome.OK, r.id)):
        theirs = _pins(r)
        if dist in theirs and r.id != failed.id:
            axes = ", ".join(f"{a} {v}" for a, v in _values(r).items() if here.get(a, "none") != v)
            moved = [f"{n} {theirs[n]} (here {mine[n]})" for n in sorted(theirs.keys() & mine.keys()) if theirs[n] != mine[n] and n not in _values(r)]
            others = f"; other packages there: {', '.join(moved[:4])}{' …' if len(moved) > 4 else ''}" if moved else ""
            return f"{missing.install} {theirs[dist]} was installed in {r.env} ({r.klass}; there {axes}{others}): one of those brought it"
    return ""


def _pins(record: Record) -> dict[str, str]:
    """The record's freeze as normalised name → version."""
    pins = record.build.pins() if record.build else []
    return {canonicalize_name(name.split("[")[0]): version for name, _, version in (line.partition("==") for line in pins)}


def find(records: Iterable[Record], previous: Iterable[Record] = ()) -> Findings:
    """The findings of a set of records; with `previous` (an earlier run), the cells that changed first."""
    records = list(records)
    groups: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for r in _ran(records):
        if not r.expect:
            groups[(r.cell.scenario, r.cell.gpu)].append(r)
    found = [f for (scenario, gpu), recs in sorted(groups.items()) if (f := _finding(scenario, gpu, recs))]
    found.sort(key=lambda f: f.everywhere)  # differences first, then what fails everywhere
    controls = [r for r in records if r.control]
    failed = tuple(sorted((r for r in controls if r.control == "not reproduced"), key=lambda r: r.id))
    return Findings(tuple(changes(records, previous)), tuple(found), Controls(len(controls), failed))


def changes(records: Iterable[Record], previous: Iterable[Record]) -> list[Change]:
    """Cells present in both runs whose outcome class differs, in id order."""
    before = {r.id: r.klass for r in previous}
    return sorted(
        (Change(r.id, before[r.id], r.klass, r) for r in records if r.id in before and before[r.id] != r.klass),
        key=lambda c: c.cell,
    )
