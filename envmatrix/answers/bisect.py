"""Pure: bisect an ordered list of releases to the first one whose outcome differs from the oldest's.

The oracle runs one release and answers its outcome class; `build_failed` and `skipped` mean the
release could not be tried, and bisection goes on around it (git bisect's `skip`). The endpoints must
show the outcomes the user claimed. A release in between that shows a third outcome means the outcome
changes more than once: bisection stops and says so rather than naming a boundary that is not one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from ..records.outcomes import Outcome

UNTESTABLE = (Outcome.BUILD_FAILED, Outcome.SKIPPED)
#: The claim "any failure class" for an endpoint.
NOT_OK = "not ok"

#: What the bisection concluded.
FOUND, ENDPOINT, FLIPS, UNRESOLVED = "found", "endpoint", "flips", "unresolved"


@dataclass
class Bisection:
    """The tried releases, the conclusion and the boundary (`before` → `first`) where one was found."""

    status: str = UNRESOLVED
    message: str = ""
    first: str | None = None  # the first release with the newer endpoint's outcome
    before: str | None = None  # the last release with the older endpoint's outcome
    tried: dict[str, str] = field(default_factory=dict)  # release → outcome, in the order tried
    skipped: list[str] = field(default_factory=list)


def releases_between(available: Sequence[str], a: str, b: str, *, pre: bool = False) -> list[str]:
    """The releases from the older of a, b to the newer, both included, in version order;
    pre-releases and dev releases excluded unless `pre` (an endpoint is always kept)."""
    lo, hi = sorted((Version(a), Version(b)))
    kept = set()
    for text in available:
        try:
            v = Version(text)
        except InvalidVersion:
            continue
        if lo <= v <= hi and (pre or not (v.is_prerelease or v.is_devrelease) or text in (a, b)):
            kept.add(text)
    kept.update((a, b))
    return sorted(kept, key=Version)


def bisect(releases: Sequence[str], oracle: Callable[[str], str], *, expect_old: str | None = None, expect_new: str | None = None) -> Bisection:
    """Find the first release whose outcome differs from releases[0]'s (releases in version order).

    `expect_old`/`expect_new`: the outcomes claimed for the endpoints (None: take what they show,
    but they must differ); `"not ok"` claims any failure class."""
    out = Bisection()
    if len(releases) < 2:
        out.status, out.message = ENDPOINT, "need two different releases to bisect between"
        return out

    def run(release: str) -> str:
        if release not in out.tried:
            out.tried[release] = oracle(release)
        return out.tried[release]

    old, new = releases[0], releases[-1]
    for release, claim in ((old, expect_old), (new, expect_new)):
        got = run(release)
        if got in UNTESTABLE:
            out.status, out.message = ENDPOINT, f"endpoint {release} could not be tried ({got}); pick an endpoint that installs"
            return out
        if claim is not None and not _shows(got, claim):
            out.status, out.message = ENDPOINT, f"endpoint {release} shows {got}, not the {claim} claimed for it; nothing to bisect"
            return out
    old_outcome, new_outcome = out.tried[old], out.tried[new]
    if old_outcome == new_outcome:
        out.status, out.message = ENDPOINT, f"both endpoints show {old_outcome}; nothing changed between {old} and {new}"
        return out
    lo, hi = 0, len(releases) - 1  # invariant: releases[lo] shows old_outcome, releases[hi] new_outcome
    while True:
        candidates = [i for i in range(lo + 1, hi) if releases[i] not in out.skipped]
        if not candidates:
            break
        mid = (lo + hi) // 2
        i = min(candidates, key=lambda c: (abs(c - mid), c))
        got = run(releases[i])
        if got in UNTESTABLE:
            out.skipped.append(releases[i])
        elif got == old_outcome:
            lo = i
        elif got == new_outcome:
            hi = i
        else:
            out.status = FLIPS
            out.message = (
                f"{releases[i]} shows {got}, neither {old_outcome} ({old} side) nor {new_outcome} ({new} side): "
                "the outcome changes more than once in this range; bisect the narrower ranges on each side"
            )
            return out
    out.before, out.first = releases[lo], releases[hi]
    between = [r for r in releases[lo + 1 : hi]]
    if between:
        out.status = UNRESOLVED
        out.message = (
            f"the change from {old_outcome} to {new_outcome} is after {releases[lo]} and at or before {releases[hi]}, "
            f"but {', '.join(between)} could not be tried"
        )
    else:
        out.status = FOUND
        out.message = f"first release with {new_outcome}: {releases[hi]} (the release before it, {releases[lo]}, shows {old_outcome})"
    return out


def _shows(outcome: str, claim: str) -> bool:
    return outcome != Outcome.OK if claim == NOT_OK else outcome == claim
