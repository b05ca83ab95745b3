"""Bisection over releases with a fake outcome oracle (the real one builds venvs: test_bisect_real)."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from envmatrix.answers.bisect import ENDPOINT, FOUND, MAX_KIND_CHANGES, UNRESOLVED, bisect, releases_between

RELEASES = [f"5.{i}.0" for i in range(20)]


def step_at(boundary: int, before: str = "grad_lost", after: str = "ok", broken: tuple[str, ...] = ()) -> Callable[[str], str]:
    def oracle(release: str) -> str:
        if release in broken:
            return "build_failed"
        return after if RELEASES.index(release) >= boundary else before

    return oracle


@given(st.integers(min_value=1, max_value=19))
def test_finds_every_boundary_in_few_tries(boundary: int) -> None:
    result = bisect(RELEASES, step_at(boundary), expect_old="not ok", expect_new="ok")
    assert result.status == FOUND
    assert result.first == RELEASES[boundary] and result.before == RELEASES[boundary - 1]
    assert len(result.tried) <= 2 + 5  # endpoints + ceil(log2(18))


def test_uninstallable_releases_are_skipped_and_bisection_goes_on() -> None:
    result = bisect(RELEASES, step_at(7, broken=("5.9.0", "5.10.0", "5.4.0")))
    assert result.status == FOUND and result.first == "5.7.0"
    assert set(result.skipped) <= {"5.9.0", "5.10.0", "5.4.0"} and result.skipped


def test_boundary_hidden_behind_uninstallable_releases_is_unresolved() -> None:
    result = bisect(RELEASES, step_at(7, broken=("5.6.0", "5.7.0")))
    assert result.status == UNRESOLVED
    assert (result.before, result.first) == ("5.5.0", "5.8.0")
    assert "5.6.0, 5.7.0 could not be tried" in result.message


def test_endpoints_must_show_the_claimed_outcomes() -> None:
    wrong = bisect(RELEASES, step_at(7), expect_old="ok", expect_new="not ok")
    assert wrong.status == ENDPOINT and "shows grad_lost, not the ok claimed" in wrong.message
    same = bisect(RELEASES, lambda r: "ok")
    assert same.status == ENDPOINT and "both endpoints show ok" in same.message
    broken = bisect(RELEASES, step_at(7, broken=("5.0.0",)))
    assert broken.status == ENDPOINT and "could not be tried" in broken.message


def test_the_first_release_that_is_not_good_whatever_the_failure_then_where_the_kind_changes() -> None:
    # transformers under trl 0.19.1: ok to 5.0.0, error (an API trl still uses is gone) from 5.1.0, missing_module from 5.4.0
    def oracle(release: str) -> str:
        i = RELEASES.index(release)
        return "ok" if i < 5 else "error" if i < 9 else "missing_module"

    result = bisect(RELEASES, oracle, expect_old="ok", expect_new="not ok")
    assert result.status == FOUND
    assert (result.before, result.first) == ("5.4.0", "5.5.0")
    assert result.kinds == [("5.5.0", "error"), ("5.9.0", "missing_module")]
    assert "first release whose outcome is not ok: 5.5.0 (error)" in result.message and "missing_module from 5.9.0" in result.message
    assert len(result.tried) <= 2 + 5 + 3, "the walk over kinds reuses the first search's runs"


def test_the_walk_over_kinds_reuses_what_was_tried() -> None:
    """transformers under trl 0.19.1, as measured: the first search already tried 5.4.0 (missing_module), so the walk
    from 5.1.0 (error) looks between 5.1.0 and 5.4.0 only."""
    releases = ["4.57.6", "5.0.0", "5.1.0", "5.2.0", "5.3.0", "5.4.0", "5.5.1", "5.5.4", "5.6.1", "5.11.0", "5.12.0", "5.23.0"]
    outcome = {**dict.fromkeys(releases[:2], "ok"), **dict.fromkeys(releases[2:4], "error"), **dict.fromkeys(releases[4:], "missing_module")}
    asked: list[str] = []

    def oracle(release: str) -> str:
        asked.append(release)
        return outcome[release]

    result = bisect(releases, oracle, expect_old="ok", expect_new="not ok")
    assert result.kinds == [("5.1.0", "error"), ("5.3.0", "missing_module")]
    assert len(asked) == len(set(asked)) <= 7 and not set(asked) & {"5.5.1", "5.5.4", "5.6.1", "5.11.0", "5.12.0"}, asked


@given(st.lists(st.sampled_from(["error", "missing_module", "nan_loss", "crash"]), min_size=1, max_size=6), st.integers(min_value=1, max_value=19))
def test_any_sequence_of_failures_after_the_boundary_still_names_it(kinds: list[str], boundary: int) -> None:
    tail = len(RELEASES) - boundary

    def oracle(release: str) -> str:
        i = RELEASES.index(release)
        return "ok" if i < boundary else kinds[min((i - boundary) * len(kinds) // tail, len(kinds) - 1)]

    result = bisect(RELEASES, oracle)
    assert result.status == FOUND and result.first == RELEASES[boundary]
    assert result.kinds[0] == (RELEASES[boundary], kinds[0]) and len(result.kinds) <= MAX_KIND_CHANGES + 1
    for (release, outcome), (later, other) in zip(result.kinds, result.kinds[1:], strict=False):
        assert outcome != other and RELEASES.index(later) > RELEASES.index(release)
        assert oracle(RELEASES[RELEASES.index(later) - 1]) == outcome, "each change is named at its first release"


def test_a_fix_or_a_break_both_directions() -> None:
    broke = bisect(RELEASES, step_at(12, before="ok", after="zero_grad"), expect_old="ok", expect_new="not ok")
    assert broke.status == FOUND and broke.first == "5.12.0"


def test_releases_between_orders_and_drops_prereleases() -> None:
    available = ["5.0.0", "4.57.6", "5.1.0rc1", "4.57.5", "5.1.0", "5.0.0.dev0", "junk", "5.2.0", "4.10.0"]
    assert releases_between(available, "5.1.0", "4.57.6") == ["4.57.6", "5.0.0", "5.1.0"]
    assert releases_between(available, "4.57.6", "5.1.0", pre=True) == ["4.57.6", "5.0.0.dev0", "5.0.0", "5.1.0rc1", "5.1.0"]
