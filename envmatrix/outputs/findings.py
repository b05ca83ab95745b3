"""Pure: what differs between environments, and why, from the records alone.

A table of colours answers "what differs" only to a careful reader; this module says it in words. It
groups non-control cells by (scenario, GPU), finds the groups whose outcome is not the same
everywhere, and names the environment axes whose values separate the outcomes
("frozen-emb-reentrant: grad_lost on transformers 4.51.3, 4.57.6; ok on 5.23.0"). Controls are
summarised apart: a reproduced control is good news, one that did not reproduce is a broken detector.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..records.outcomes import Outcome
from ..records.record import Record, Status
from ..spec.matrix import AXES

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
    """One outcome of a split and the values of the explaining axis that show it."""

    outcome: str
    values: tuple[str, ...]
    cells: tuple[str, ...]


@dataclass(frozen=True)
class Finding:
    """A scenario whose outcome differs between environments on one GPU type (or fails everywhere)."""

    scenario: str
    gpu: str
    axis: str | None  # the axis whose values separate the outcomes; None when no single axis does
    sides: tuple[Side, ...]  # failing outcomes first, ok last
    example: Record  # one failing cell: its evidence and remedy explain the finding
    everywhere: bool = False  # the scenario fails the same way in every environment tried

    @property
    def text(self) -> str:
        """One line: `scenario (gpu): grad_lost on transformers 4.51.3, 4.57.6; ok on 5.23.0`."""
        head = f"{self.scenario} ({self.gpu})"
        if self.everywhere:
            return f"{head}: {self.sides[0].outcome} in every environment tried ({len(self.sides[0].cells)})"
        parts = []
        for i, side in enumerate(self.sides):
            label = f"{self.axis} " if self.axis and i == 0 else ""
            where = ", ".join(side.values) if self.axis else f"{len(side.cells)} environment{'s' if len(side.cells) > 1 else ''}"
            parts.append(f"{side.outcome} on {label}{where}")
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
    return [r for r in records if r.status != Status.SKIPPED and r.klass not in QUIET]


def _explaining_axis(recs: list[Record]) -> str | None:
    """The varying axis whose every value shows one outcome (fewest values first: the simplest story)."""
    candidates = []
    for axis in AXES:
        by_value: dict[str, set[str]] = defaultdict(set)
        for r in recs:
            by_value[r.cell.axes()[axis]].add(r.klass)
        if len(by_value) > 1 and all(len(outcomes) == 1 for outcomes in by_value.values()):
            candidates.append((len(by_value), AXES.index(axis), axis))
    return min(candidates)[2] if candidates else None


def _finding(scenario: str, gpu: str, recs: list[Record]) -> Finding | None:
    outcomes = {r.klass for r in recs}
    failing = sorted((r for r in recs if r.klass != Outcome.OK), key=lambda r: r.id)
    if not failing:
        return None
    if len(outcomes) == 1:
        side = Side(failing[0].klass, (), tuple(r.id for r in failing))
        return Finding(scenario, gpu, None, (side,), failing[0], everywhere=True)
    axis = _explaining_axis(recs)
    by_outcome: dict[str, list[Record]] = defaultdict(list)
    for r in recs:
        by_outcome[r.klass].append(r)
    order = sorted(by_outcome, key=lambda o: (o == Outcome.OK, o))
    sides = tuple(
        Side(
            outcome,
            tuple(sort_values(r.cell.axes()[axis] for r in by_outcome[outcome])) if axis else (),
            tuple(sorted(r.id for r in by_outcome[outcome])),
        )
        for outcome in order
    )
    return Finding(scenario, gpu, axis, sides, failing[0])


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
