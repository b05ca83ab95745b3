"""Pure sharding: the cells of a plan → N deterministic, cost-balanced slices cut along environments.

An environment (plan.builds) goes to one shard only, so no two hosts build the same image or venv.
Within each GPU type the environments are placed by LPT (longest processing time first: the costliest
environment goes to the lightest shard). Its guarantee, which the tests check: the heaviest shard
carries at most the lightest shard's cost plus the costliest single environment; so whenever the
lightest shard holds at least one costliest environment's worth, heaviest ≤ 2 × lightest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .builds import builds
from .cells import PLANNED, Cell

# Estimated seconds, from the probe timings measured on the CPU profile (shared/FACTS.md §7): a probe
# process pays ~6 s of imports, then each step costs per rank; an environment costs a build once.
PROCESS_SECONDS = 6.0
STEP_SECONDS = 0.5
RANK_SECONDS = 2.0
BUILD_SECONDS = 30.0


def cell_cost(cell: Cell, durations: Mapping[str, float] | None = None) -> float:
    """Seconds a planned cell is expected to take: its measured duration when known, else an estimate."""
    if cell.status != PLANNED:
        return 0.0
    if durations is not None and cell.id in durations:
        return max(0.0, float(durations[cell.id]))
    return PROCESS_SECONDS + cell.scenario.world_size * (RANK_SECONDS + STEP_SECONDS * cell.scenario.steps)


def groups(cells: Sequence[Cell], durations: Mapping[str, float] | None = None) -> list[tuple[str, float, list[Cell]]]:
    """(key, cost, cells) per environment and GPU type; skipped cells ride with their environment's group."""
    gpus = dict.fromkeys(c.env.gpu for c in cells)
    planned = {(gpu, b.build_id) for gpu in gpus for b in builds([c for c in cells if c.env.gpu == gpu])}
    out: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        out.setdefault((cell.env.gpu, cell.env.build_id), []).append(cell)
    result = []
    for (gpu, build_id), members in out.items():
        cost = sum(cell_cost(c, durations) for c in members) + (BUILD_SECONDS if (gpu, build_id) in planned else 0.0)
        result.append((f"{gpu}/{build_id}", cost, members))
    return result


def shard(cells: Sequence[Cell], n: int, durations: Mapping[str, float] | None = None) -> list[list[Cell]]:
    """Partition `cells` into `n` lists (some may be empty), each GPU type balanced on its own, plan order kept."""
    if n < 1:
        raise ValueError(f"shard count must be at least 1, got {n}")
    owner: dict[str, int] = {}
    by_gpu: dict[str, list[tuple[str, float, list[Cell]]]] = {}
    for key, cost, members in groups(cells, durations):
        by_gpu.setdefault(members[0].env.gpu, []).append((key, cost, members))
    for gpu in sorted(by_gpu):
        load = [0.0] * n
        for _key, cost, members in sorted(by_gpu[gpu], key=lambda g: (-g[1], g[0])):
            target = min(range(n), key=lambda i: (load[i], i))
            load[target] += cost
            for cell in members:
                owner[cell.id] = target
    slices: list[list[Cell]] = [[] for _ in range(n)]
    for cell in cells:
        slices[owner[cell.id]].append(cell)
    return slices


def shard_load(cells: Sequence[Cell], durations: Mapping[str, float] | None = None) -> float:
    """A slice's estimated cost: its cells plus one build per environment it holds."""
    return sum(cost for _key, cost, _members in groups(cells, durations))
