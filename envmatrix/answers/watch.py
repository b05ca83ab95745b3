"""`envmatrix watch`, the pure part: what a watch found, and the decisions made over outcomes (which scenarios
an axis can change, what counts as broken, what upgrade order the runs support). watch_run.py runs the cells;
watch_summary.py says it.

A watch starts from a profile's baseline (one release per axis: the team's stack, as `init` wrote it), tries
the newest release of each axis with everything else at the baseline, then all newest together; where a
scenario's outcome changes from the baseline's it bisects that axis to the first release that changes it,
and looks for the order of upgrades that trains (the newest of the other axes beside the breaking one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..facts.nameindex import canonical, requirers
from ..plan.cells import Environment
from ..plan.eligibility import SCENARIO_PACKAGES, depends_on
from ..records.outcomes import Outcome
from ..records.record import Record
from ..spec.matrix import AXES, Scenario
from .bisect import Bisection

#: The environment axes whose releases a watch tries (cuda, gpu and python are where and how, not releases).
RELEASE_AXES = ("torch", "transformers", "flash_attn")


def affects(axis: str, scenario: Scenario, gpu: str) -> bool:
    """Whether a new release of `axis` can change the scenario's outcome: an environment axis always; a package axis
    when the scenario depends on it (plan.eligibility.depends_on, the one owner), or when it is a package that no
    scenario field names (its effect cannot be ruled out)."""
    return axis in AXES or axis not in SCENARIO_PACKAGES or axis in depends_on(scenario, gpu)


def healthy(record: Record) -> bool:
    """A cell that shows what it should: ok for a healthy scenario, its expected class for a control."""
    return record.klass == (record.expect or Outcome.OK)


def untestable(record: Record) -> bool:
    """A cell whose environment could not be made (skipped, build failed): it says nothing about the stack."""
    return record.klass in (Outcome.SKIPPED, Outcome.BUILD_FAILED)


@dataclass
class AxisWatch:
    """One axis: its baseline, the releases beyond it on the index, the newest tried and what it showed."""

    axis: str
    baseline: str
    listed: int = 0  # releases beyond the baseline on the indexes (for this Python)
    newer: list[str] = field(default_factory=list)  # releases up to `newest` not ruled out: the bisection's range
    ruled_out: dict[str, str] = field(default_factory=dict)  # release → why it cannot install (catalog, metadata)
    newest: str | None = None  # the newest that installs with everything else at the baseline
    latest: str | None = None  # the newest on the index for this Python, even if it needs other axes moved
    records: dict[str, Record] = field(default_factory=dict)  # scenario → its record with the axis at newest
    problem: str | None = None  # the index could not be asked, or nothing beyond the baseline
    unreachable: bool = False  # no index answered for it


@dataclass
class Regression:
    """A scenario that changed from the baseline's outcome with a newer release of one axis, bisected."""

    axis: str
    scenario: str
    baseline_outcome: str
    newest: str
    newest_outcome: str
    bisection: Bisection | None = None
    records: dict[str, Record] = field(default_factory=dict)  # release → record, the bisection's runs
    broke: bool = True  # False: a failure at the baseline that a newer release fixes


@dataclass
class Order:
    """How to take the newest release of an axis that breaks: the other axes to move first, and the runs that say so."""

    axis: str
    scenario: str
    text: str
    works: bool
    tried: list[tuple[dict[str, str], str]] = field(default_factory=list)  # (what moved, outcome)


@dataclass
class Watch:
    """Everything one watch found, from which the summary and the JSON are written."""

    profile: str
    gpu: str
    base: Environment
    scenarios: list[str]
    baseline: dict[str, Record] = field(default_factory=dict)
    axes: list[AxisWatch] = field(default_factory=list)
    all_newest: dict[str, Record] = field(default_factory=dict)
    all_newest_env: Environment | None = None
    regressions: list[Regression] = field(default_factory=list)
    orders: list[Order] = field(default_factory=list)
    ran: int = 0
    cached: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    listed_only: bool = False  # the host backend: the releases beyond the baseline were listed, not run

    @property
    def broken(self) -> list[Regression]:
        return [r for r in self.regressions if r.broke]

    @property
    def baseline_healthy(self) -> bool:
        return all(healthy(r) for r in self.baseline.values())

    def exit_code(self) -> int:
        """0 nothing broke, 1 a regression found."""
        return 1 if self.broken else 0


def changed(baseline: Record, newer: Record) -> bool | None:
    """True when a newer release breaks a cell that was healthy, False when it fixes one that was not, None when
    nothing changed that matters (or the newer cell could not be made)."""
    if untestable(newer) or untestable(baseline):
        return None
    before, after = healthy(baseline), healthy(newer)
    if before == after:
        return None
    return before


def with_axis(env: Environment, values: dict[str, str]) -> Environment:
    """The environment with some axes (environment or package) set to other releases."""
    merged: dict[str, Any] = {**env.axes(), **dict(env.packages), **values}
    return Environment.from_values(merged)


@dataclass(frozen=True)
class Try:
    """One run of the breaking axis's newest beside other axes moved (`moved`, the breaking axis included), its
    outcome (`ok` when the cell showed what it should), and for each other moved axis what its release showed on
    the baseline alone (`ok`, an outcome, or why it cannot install there)."""

    moved: dict[str, str]
    outcome: str
    alone: dict[str, str]


def candidates(w: Watch, reg: Regression, scenario: Scenario, caller: str | None, callee: str | None) -> list[AxisWatch]:
    """The other axes an upgrade order tries beside the breaking one, in the order tried: the package the verdict names
    as the caller of the failing boundary first (it is the one written for the release that broke), then the packages
    that always require the callee (its neighbours, facts/nameindex.py), then the rest. Every installed package is a
    candidate whatever the scenario uses: a package the scenario never calls can still break it at import (peft
    importing what transformers removed, under TRL's trainer)."""
    others = [
        a
        for a in w.axes
        if a.axis != reg.axis and a.latest is not None and (affects(a.axis, scenario, w.base.gpu) or w.base.package(a.axis) not in ("none", ""))
    ]
    neighbours = set(requirers(callee)) if callee else set()

    def rank(a: AxisWatch) -> int:
        name = canonical(a.axis)
        return 0 if caller and name == canonical(caller) else 1 if name in neighbours else 2

    return sorted(others, key=rank)


def order_text(axis: str, scenario: str, tries: list[Try], together: str | None, caller: str | None = None) -> tuple[str, bool]:
    """The upgrade order in words, from runs: the try that trains with the fewest axes moved; the axes that train on
    the baseline alone go first, the rest move together with the breaking axis. `together`: the outcome with every
    axis at its newest; `caller`: the package the verdict names as the caller of the failing boundary, tried first."""
    trains = sorted((t for t in tries if t.outcome == Outcome.OK), key=lambda t: len(t.moved))
    if trains:
        best = trains[0]
        newest = best.moved[axis]
        first = [f"{k} to {v}" for k, v in best.moved.items() if k != axis and best.alone.get(k) == Outcome.OK]
        with_it = {k: v for k, v in best.moved.items() if k != axis and best.alone.get(k) != Outcome.OK}
        steps = f"move {' and '.join(first)} first ({scenario} trains with {'it' if len(first) == 1 else 'them'} on the baseline); then " if first else ""
        if with_it:
            why = "; ".join(f"{k} {v} on the baseline: {best.alone.get(k, 'not tried')}" for k, v in with_it.items())
            steps += f"move {axis} to {newest} together with {', '.join(f'{k} {v}' for k, v in with_it.items())} ({why}); together they train"
        else:
            steps += f"{axis} {newest} trains"
        return steps[0].upper() + steps[1:], True
    named = next((t for t in tries if caller and any(canonical(k) == canonical(caller) for k in t.moved)), None)
    tried_first = f" ({caller}, the caller the verdict names, was tried first: {named.outcome})" if named is not None else ""
    if together == Outcome.OK:
        return f"No single other upgrade is enough{tried_first}; {axis} trains at its newest with every other axis at its newest", True
    tried = ", ".join(" + ".join(f"{k} {v}" for k, v in t.moved.items()) + f" ({t.outcome})" for t in tries)
    return f"No upgrade order found ({tried or 'no other axis to move'}){tried_first}: stay on the lock", False
