"""Shards partition the plan exactly, never split an environment, stay balanced, and are deterministic."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envmatrix.plan.cells import PLANNED, SKIPPED, Cell, Environment
from envmatrix.plan.expand import expand
from envmatrix.plan.shard import cell_cost, groups, shard, shard_load
from envmatrix.spec.matrix import Scenario, load

ROOT = Path(__file__).resolve().parents[3]


def make_plan(seed: int) -> list[Cell]:
    """A random plan: 1–3 GPU types, 1–12 environments each, 1–6 scenarios of varied cost, some skipped."""
    rng = random.Random(seed)
    scenarios = [Scenario(name=f"s{i}", world_size=rng.choice([1, 1, 2, 4]), steps=rng.choice([2, 4, 8, 40])) for i in range(rng.randint(1, 6))]
    cells: list[Cell] = []
    for gpu in rng.sample(["A100", "H20", "cpu"], rng.randint(1, 3)):
        for e in range(rng.randint(1, 12)):
            env = Environment("12.4", f"2.{e}.0", "4.51.3", "none", gpu, "3.11")
            for s in scenarios:
                skipped = rng.random() < 0.15
                cells.append(Cell(env, s, SKIPPED if skipped else PLANNED, "no wheel" if skipped else ""))
    return cells


def check(cells: list[Cell], n: int) -> list[list[Cell]]:
    slices = shard(cells, n)
    assert len(slices) == n
    ids = [c.id for part in slices for c in part]
    assert sorted(ids) == sorted(c.id for c in cells), "the union of the shards is the plan, each cell once"
    owner = {c.id: i for i, part in enumerate(slices) for c in part}
    env_owner: dict[tuple[str, str], set[int]] = {}
    for c in cells:
        env_owner.setdefault((c.env.gpu, c.env.build_id), set()).add(owner[c.id])
    assert all(len(s) == 1 for s in env_owner.values()), "an environment was split across shards"
    for part in slices:
        members = {c.id for c in part}
        assert part == [c for c in cells if c.id in members], "plan order is kept within a shard"
    for gpu in {c.env.gpu for c in cells}:
        loads = [shard_load([c for c in part if c.env.gpu == gpu]) for part in slices]
        costliest = max(cost for _k, cost, m in groups([c for c in cells if c.env.gpu == gpu]))
        assert max(loads) <= min(loads) + costliest + 1e-9, "LPT bound: heaviest ≤ lightest + costliest environment"
        if min(loads) >= costliest:
            assert max(loads) <= 2 * min(loads) + 1e-9
    return slices


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 9))
def test_generated_plans_partition_and_balance(seed: int, n: int) -> None:
    check(make_plan(seed), n)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_the_repository_matrix_gpu_profile(n: int) -> None:
    cells = expand(load(ROOT / "matrix.yaml"), "gpu")
    slices = check(cells, n)
    assert slices == shard(list(cells), n), "deterministic"
    if n <= 4:  # 2 GPU types × many environments: every shard gets work
        assert all(any(c.status == PLANNED for c in part) for part in slices)


def test_same_input_same_shards_whatever_the_process() -> None:
    cells = make_plan(7)
    assert [[c.id for c in p] for p in shard(cells, 4)] == [[c.id for c in p] for p in shard(list(cells), 4)]


def test_measured_durations_steer_the_balance() -> None:
    scenario = Scenario(name="s")
    cells = [Cell(Environment("none", f"2.{i}.0", "4.51.3", "none", "cpu", "3.11"), scenario) for i in range(4)]
    slow = {cells[0].id: 1000.0}
    assert cell_cost(cells[0], slow) == 1000.0
    slices = shard(cells, 2, slow)
    heavy = next(p for p in slices if cells[0] in p)
    assert heavy == [cells[0]], "one measured-slow environment gets a shard to itself"
    assert shard(cells, 2) != slices


def test_more_shards_than_environments_leaves_some_empty() -> None:
    cells = make_plan(3)
    n = len({(c.env.gpu, c.env.build_id) for c in cells}) + 3
    slices = check(cells, n)
    assert sum(1 for p in slices if not p) >= 3


def test_skipped_only_environments_are_assigned_too() -> None:
    env = Environment("none", "2.0.0", "4.51.3", "none", "cpu", "3.11")
    cells = [Cell(env, Scenario(name="a"), SKIPPED, "no wheel")]
    assert shard(cells, 3)[0] == cells


def test_zero_shards_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        shard([], 0)
