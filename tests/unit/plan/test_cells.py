"""Expansion, ids, selection patterns, exclude/include rules, and the plan's environment count."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envmatrix.plan import builds as plan
from envmatrix.plan.cells import SKIPPED, matches
from envmatrix.plan.expand import expand
from envmatrix.spec.matrix import load
from envmatrix.spec.patterns import MAX_EXPANSIONS, PatternError, check, compile_selection, expand_braces

Make = Callable[..., Path]


def test_ids_are_stable_and_readable(matrix: Make) -> None:
    cells = expand(load(matrix()), "gpu")
    ids = [c.id for c in cells]
    assert "cu124-torch2.5.1-tf4.51.3-fa2.7.4.post1-h20-py3.11/bf16-fa2" in ids
    assert "cu124-torch2.6.0-tf4.51.3-fanone-a100-py3.11/fp32-sdpa" in ids
    assert len(ids) == len(set(ids)) == 2 * 2 * 2 * 3
    assert ids == [c.id for c in expand(load(matrix()), "gpu")]


def test_cpu_ids(matrix: Make) -> None:
    ids = [c.id for c in expand(load(matrix()), "cpu")]
    assert ids[0] == "cpu-torch2.13.0-tf4.51.3-fanone-cpu-py3.11/fp32-sdpa"


def test_skipped_cells_stay_with_reasons(matrix: Make) -> None:
    cells = {c.id: c for c in expand(load(matrix()), "cpu")}
    fa2 = cells["cpu-torch2.13.0-tf4.51.3-fanone-cpu-py3.11/bf16-fa2"]
    assert fa2.status == SKIPPED
    assert "needs flash-attn" in fa2.reason and "needs a CUDA GPU of sm80+" in fa2.reason
    assert cells["cpu-torch2.13.0-tf4.51.3-fanone-cpu-py3.11/fp32-sdpa"].status == "planned"


def test_flash_wheel_reason_in_plan(matrix: Make) -> None:
    cells = {c.id: c for c in expand(load(matrix(lambda d: d["profiles"]["gpu"]["torch"].append("2.7.1"))), "gpu")}
    cell = cells["cu124-torch2.7.1-tf4.51.3-fa2.7.4.post1-a100-py3.11/bf16-fa2"]
    assert cell.status == SKIPPED
    assert "flash-attn 2.7.4.post1 publishes no wheel for torch 2.7" in cell.reason
    assert "allow it with build_from_source: true" in cell.reason
    assert "no cu124" in cell.reason


def test_only_and_skip_patterns(matrix: Make) -> None:
    spec = load(matrix())
    only = expand(spec, "gpu", only=["*-fa{none,2.7.4.post1}-h20-*/fp32-sdpa"])
    assert {c.env.gpu for c in only} == {"H20"} and {c.scenario.name for c in only} == {"fp32-sdpa"}
    assert len(only) == 4
    skipped = expand(spec, "gpu", skip=["*/ctl-*", "*-a100-*"])
    assert all(c.scenario.name != "ctl-zero-grad" and c.env.gpu == "H20" for c in skipped)


def test_pattern_matches_environment_prefix() -> None:
    assert matches("cu124-torch2.5.1-tf4.51.3-fanone-h20-py3.11/x", ["cu124-torch2.5.1-tf4.51.3-fanone-h20-py3.11"])
    assert not matches("cu124-x/y", ["cu128-*"])


def test_brace_expansion() -> None:
    assert expand_braces("a{b,c}d{1,2}") == ["abd1", "abd2", "acd1", "acd2"]
    assert expand_braces("plain") == ["plain"]


def test_gpu_filter(matrix: Make) -> None:
    cells = expand(load(matrix()), "gpu", gpu="A100")
    assert cells and all(c.env.gpu == "A100" for c in cells)


def test_profile_select_skip(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["cpu"]["select"] = ["*/fp32-*", "*/ctl-*"]
        d["profiles"]["cpu"]["skip"] = ["*tf4.57.6*"]

    cells = expand(load(matrix(edit)), "cpu")
    assert {c.scenario.name for c in cells} == {"fp32-sdpa", "ctl-zero-grad"}
    assert {c.env.transformers for c in cells} == {"4.51.3"}


def test_exclude_rule_keeps_cell_as_skipped(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"]["exclude"] = [{"gpu": "H20", "scenario": "ctl-*", "reason": "slow queue"}]

    cells = expand(load(matrix(edit)), "gpu")
    ruled = [c for c in cells if c.env.gpu == "H20" and c.scenario.name == "ctl-zero-grad"]
    assert ruled and all(c.status == SKIPPED and "excluded by profiles.gpu.exclude[0]: slow queue" in c.reason for c in ruled)
    assert any(c.status == "planned" and c.env.gpu == "A100" and c.scenario.name == "ctl-zero-grad" for c in cells)


def test_include_adds_environment(matrix: Make) -> None:
    extra = {"cuda": "12.8", "torch": "2.8.0", "transformers": "4.57.6", "flash_attn": "2.8.3", "gpu": "H20"}
    cells = expand(load(matrix(lambda d: d["profiles"]["gpu"].__setitem__("include", [extra]))), "gpu")
    ids = {c.id for c in cells}
    assert "cu128-torch2.8.0-tf4.57.6-fa2.8.3-h20-py3.11/bf16-fa2" in ids


def test_builds_share_across_gpus_and_scenarios(matrix: Make) -> None:
    cells = expand(load(matrix()), "gpu")
    builds = plan.builds(cells)
    # 2 torch × 2 flash-attn, shared by both GPUs and all scenarios; skipped cells need no build
    assert len(builds) == 4
    assert sum(len(b.cells) for b in builds) == plan.counts(cells)["planned"]


def test_brace_bomb_is_refused_before_expanding() -> None:
    with pytest.raises(PatternError, match="more than 256 alternatives"):
        expand_braces("{a,b}" * 30)
    assert check("{a,b}" * 8) is None and check("{a,b}" * 9) is not None


def test_nested_and_unbalanced_braces() -> None:
    assert expand_braces("{a,{b,c}}x") == ["ax", "bx", "cx"]
    assert expand_braces("a{b") == ["a{b"] and expand_braces("}{") == ["}{"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="{},ab*", max_size=80))
def test_random_brace_patterns_stay_bounded(pattern: str) -> None:
    """Property: a pattern either expands to at most MAX_EXPANSIONS alternatives or is refused; never more, never another error."""
    try:
        alts = expand_braces(pattern)
    except PatternError:
        assert check(pattern) is not None
        return
    assert 1 <= len(alts) <= MAX_EXPANSIONS
    compile_selection([pattern])


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab*?/-.", max_size=12), st.text(alphabet="ab/-.", max_size=12))
def test_compiled_selection_agrees_with_fnmatch(pattern: str, cell_id: str) -> None:
    """Without braces, one compiled selection means what fnmatch means (a pattern naming an environment selects its cells)."""
    assert matches(cell_id, [pattern]) == (fnmatch.fnmatchcase(cell_id, pattern) or fnmatch.fnmatchcase(cell_id, pattern + "/*"))


def test_a_family_the_transformers_release_lacks_is_skipped_with_the_release_that_added_it(matrix: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["profiles"]["cpu"]["transformers"] = ["4.40.0", "4.57.6"]
        data["scenarios"] = {"gemma2": {"model": "gemma2", "attn": "eager"}}

    cells = {c.env.transformers: c for c in expand(load(matrix(edit)), "cpu")}
    assert cells["4.40.0"].status == "skipped" and "gemma2 needs transformers >= 4.42.0" in cells["4.40.0"].reason
    assert cells["4.57.6"].status == "planned"
