"""Economy without hand-written rules: each scenario runs once per distinct value of what it depends on.

A scenario's outcome can change with the environment's own axes and with the package axes it depends on
(eligibility.depends_on); two environments that differ only in other package axes (trl installed or not, for the
built-in loop) give it the same outcome. So among the planned cells of one scenario that agree on all of those,
one runs, in the environment closest to the profile's base (the first value of each package axis), and the others
are `covered` by it: shown in the plan, recorded and reported with its outcome, never silently dropped. A profile's
`every_environment:` names scenarios (patterns) that run in every environment all the same.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import replace

from ..spec.matrix import Profile
from .cells import COVERED, PLANNED, Cell, Environment
from .eligibility import depends_on


def base_values(profile: Profile) -> dict[str, str]:
    """The profile's base for each package axis: its first value (`trl: [none, 0.19.1]` → none)."""
    return {name: values[0] for name, values in profile.packages.items() if values}


def distance(env: Environment, base: dict[str, str]) -> int:
    """How many package axes of `env` differ from the base (an axis the profile does not declare counts at none)."""
    names = set(base) | {name for name, _ in env.packages}
    return sum(env.package(name) != base.get(name, "none") for name in names)


def key(cell: Cell, axes: Sequence[str]) -> tuple[object, ...]:
    """What a cell's outcome can depend on: the scenario, the environment's own axes, the package axes it depends on."""
    env = cell.env
    own = (env.cuda, env.torch, env.transformers, env.flash_attn, env.gpu, env.python)
    return (cell.scenario.name, own, tuple((name, env.package(name)) for name in axes))


def cover(profile: Profile, cells: list[Cell]) -> list[Cell]:
    """The cells with every planned cell but one per key marked covered by the one that runs (the closest to
    the profile's base; the first in plan order among equals); skipped cells and `every_environment`
    scenarios as they were. Pure: the plan's order is kept."""
    base = base_values(profile)
    groups: dict[tuple[object, ...], list[int]] = {}
    for i, cell in enumerate(cells):
        if cell.status != PLANNED or any(fnmatch.fnmatchcase(cell.scenario.name, p) for p in profile.every_environment):
            continue
        groups.setdefault(key(cell, depends_on(cell.scenario, cell.env.gpu)), []).append(i)
    out = list(cells)
    for members in groups.values():
        if len(members) < 2:
            continue
        runs = min(members, key=lambda i: (distance(cells[i].env, base), i))
        ran = cells[runs]
        axes = depends_on(ran.scenario, ran.env.gpu)
        for i in members:
            if i != runs:
                out[i] = replace(cells[i], status=COVERED, reason=covered_reason(ran, cells[i], axes), covered_by=ran.id)
    return out


def covered_reason(ran: Cell, cell: Cell, axes: Sequence[str]) -> str:
    """Why a cell is covered, in words: what its scenario depends on, where the environments differ."""
    differ = sorted({name for name, _ in (*ran.env.packages, *cell.env.packages) if ran.env.package(name) != cell.env.package(name)})
    on = ", ".join(axes) if axes else "no package axis"
    return f"covered by {ran.id}: {cell.scenario.name} depends on {on}, and the environments differ only in {', '.join(differ)}"
