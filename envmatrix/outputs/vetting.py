"""Pure: which environments are vetted on a GPU type, and the newest of them.

An environment is vetted on a GPU when, there, every scenario without an expectation that ran is ok,
every control that ran reproduced its failure, and at least one healthy scenario ran.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..records.outcomes import Outcome
from ..records.record import CellInfo, Record, Status


@dataclass(frozen=True)
class Vetted:
    """A vetted environment (environment × GPU) and how many scenarios vouch for it."""

    env: str
    cell: CellInfo  # one of its cells: the axis values and build id
    healthy: int
    controls: int

    @property
    def gpu(self) -> str:
        return self.cell.gpu

    @property
    def python(self) -> str:
        return self.cell.python

    def as_dict(self) -> dict[str, object]:
        return {"env": self.env, "build": self.cell.build, **self.cell.axes(), "healthy": self.healthy, "controls": self.controls}


def vetted_environments(records: list[Record]) -> list[Vetted]:
    """One entry per vetted environment id (environment × GPU), in id order."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for rec in records:
        if rec.status != Status.SKIPPED:
            groups[rec.env].append(rec)
    vetted = []
    for env_id, recs in sorted(groups.items()):
        healthy = [r for r in recs if not r.expect]
        controls = [r for r in recs if r.expect]
        if healthy and all(r.klass == Outcome.OK for r in healthy) and all(r.control == "reproduced" for r in controls):
            vetted.append(Vetted(env=env_id, cell=recs[0].cell, healthy=len(healthy), controls=len(controls)))
    return vetted


def _version(text: str) -> Version:
    try:
        return Version("0" if text == "none" else text)
    except InvalidVersion:
        return Version("0")


def _key(entry: Vetted) -> tuple[Version, Version, Version, Version]:
    c = entry.cell
    return (_version(c.torch), _version(c.transformers), _version(c.flash_attn), _version(c.cuda))


def best(vetted: list[Vetted], gpu: str) -> Vetted | None:
    """The newest vetted environment for a GPU type (torch, then transformers, flash-attn, CUDA)."""
    mine = [v for v in vetted if v.gpu == gpu]
    return max(mine, key=_key) if mine else None
