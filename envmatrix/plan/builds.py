"""Pure planning: cells → the environments (images or venvs) to build, each exactly once."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .cells import PLANNED, Cell, Environment


@dataclass(frozen=True)
class Build:
    """One image or venv and the planned cells that will run in it."""

    build_id: str
    env: Environment
    cells: tuple[Cell, ...]


def builds(cells: list[Cell]) -> list[Build]:
    """Group planned cells by build id, keeping first-seen order (skipped cells need no build)."""
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        if cell.status == PLANNED:
            groups.setdefault(cell.env.build_id, []).append(cell)
    return [Build(bid, group[0].env, tuple(group)) for bid, group in groups.items()]


def counts(cells: list[Cell]) -> dict[str, int]:
    """Cells per status."""
    return dict(Counter(cell.status for cell in cells))
