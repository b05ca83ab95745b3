"""Pure: bisect an ordered list of releases to the first one whose outcome is not the oldest's, then say
where the kind of outcome changes after it.

The question a user asks is "where does it stop working?": the first release whose outcome is not the
good side's, whatever the failure. So bisection keeps one invariant, `releases[lo]` shows the oldest
release's outcome and `releases[hi]` does not, and any other outcome counts as "not": a range where
transformers 5.1.0 fails with `error` and 5.4.0 with `missing_module` still has one answer, 5.1.0. Then
the kinds are walked: from the first release to the newest, each next release whose outcome differs from
the one before it, by the same bisection (a few runs each), so the answer also says "error from 5.1.0,
missing_module from 5.4.0".

The oracle runs one release and answers its outcome class; `build_failed` and `skipped` mean the release
could not be tried, and bisection goes on around it (git bisect's `skip`). The endpoints must show the
outcomes the user claimed. As with git bisect, a range whose outcome goes back and forth has several
boundaries; bisection names one of them and the releases it tried show the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from ..records.outcomes import Outcome

UNTESTABLE = (Outcome.BUILD_FAILED, Outcome.SKIPPED)
#: The claim "any failure class" for an endpoint.
NOT_OK = "not ok"
#: How many changes of kind after the first boundary are walked (each costs a bisection of its own).
MAX_KIND_CHANGES = 4

#: What the bisection concluded.
FOUND, ENDPOINT, UNRESOLVED = "found", "endpoint", "unresolved"


@dataclass
class Bisection:
    """The tried releases, the conclusion, the boundary (`before` → `first`) where one was found, and
    where the kind of outcome changes from `first` on: `kinds`, (release, outcome) in version order."""

    status: str = UNRESOLVED
    message: str = ""
    first: str | None = None  # the first release whose outcome is not the oldest's
    before: str | None = None  # the last release that still shows the oldest's outcome
    tried: dict[str, str] = field(default_factory=dict)  # release → outcome, in the order tried
    skipped: list[str] = field(default_factory=list)
    kinds: list[tuple[str, str]] = field(default_factory=list)

    @property
    def good(self) -> str | None:
        """The outcome of the oldest release tried (the side the search starts from)."""
        return next(iter(self.tried.values()), None)


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


class _Search:
    """The oracle with memory: every release is run at most once, whatever the step that asks."""

    def __init__(self, releases: Sequence[str], oracle: Callable[[str], str], out: Bisection) -> None:
        self.releases = list(releases)
        self.oracle = oracle
        self.out = out

    def run(self, release: str) -> str:
        if release not in self.out.tried:
            self.out.tried[release] = self.oracle(release)
        return self.out.tried[release]

    def boundary(self, lo: int, hi: int) -> tuple[int, int]:
        """Narrow [lo, hi], where lo shows its outcome and hi another, to adjacent testable releases; releases already
        tried in between narrow it first (the walk over kinds reuses the first search's runs)."""
        same = self.run(self.releases[lo])
        known = {i: self.out.tried[r] for i, r in enumerate(self.releases) if lo < i < hi and r in self.out.tried}
        hi = min((i for i, o in known.items() if o != same and o not in UNTESTABLE), default=hi)
        lo = max((i for i, o in known.items() if o == same and i < hi), default=lo)
        while True:
            candidates = [i for i in range(lo + 1, hi) if self.releases[i] not in self.out.skipped]
            if not candidates:
                return lo, hi
            mid = (lo + hi) // 2
            i = min(candidates, key=lambda c: (abs(c - mid), c))
            got = self.run(self.releases[i])
            if got in UNTESTABLE:
                self.out.skipped.append(self.releases[i])
            elif got == same:
                lo = i
            else:
                hi = i

    def hidden(self, lo: int, hi: int) -> list[str]:
        """The releases strictly between lo and hi (untestable ones, once boundary() is done)."""
        return self.releases[lo + 1 : hi]


def bisect(releases: Sequence[str], oracle: Callable[[str], str], *, expect_old: str | None = None, expect_new: str | None = None) -> Bisection:
    """Find the first release whose outcome is not releases[0]'s (releases in version order), then where the
    kind of outcome changes up to the newest. `expect_old`/`expect_new`: the outcomes claimed for the
    endpoints (None: take what they show, but they must differ); `"not ok"` claims any failure class."""
    out = Bisection()
    if len(releases) < 2:
        out.status, out.message = ENDPOINT, "need two different releases to bisect between"
        return out
    search = _Search(releases, oracle, out)
    old, new = releases[0], releases[-1]
    for release, claim in ((old, expect_old), (new, expect_new)):
        got = search.run(release)
        if got in UNTESTABLE:
            out.status, out.message = ENDPOINT, f"endpoint {release} could not be tried ({got}); pick an endpoint that installs"
            return out
        if claim is not None and not _shows(got, claim):
            out.status, out.message = ENDPOINT, f"endpoint {release} shows {got}, not the {claim} claimed for it; nothing to bisect"
            return out
    good, last = out.tried[old], out.tried[new]
    if good == last:
        out.status, out.message = ENDPOINT, f"both endpoints show {good}; nothing changed between {old} and {new}"
        return out
    lo, hi = search.boundary(0, len(releases) - 1)
    out.before, out.first = releases[lo], releases[hi]
    if search.hidden(lo, hi):
        out.status = UNRESOLVED
        out.message = (
            f"the outcome stops being {good} after {releases[lo]} and at or before {releases[hi]} ({out.tried[releases[hi]]}), "
            f"but {', '.join(search.hidden(lo, hi))} could not be tried"
        )
        return out
    out.status = FOUND
    out.kinds = _kinds(search, hi)
    out.message = f"first release whose outcome is not {good}: {releases[hi]} ({out.tried[releases[hi]]}); {releases[lo]} before it shows {good}"
    if len(out.kinds) > 1:
        out.message += "; then " + ", ".join(f"{outcome} from {release}" for release, outcome in out.kinds[1:])
    return out


def _kinds(search: _Search, start: int) -> list[tuple[str, str]]:
    """From the first release that changed to the newest: each next release whose outcome differs from the
    one before it (a bisection each), at most MAX_KIND_CHANGES; a boundary hidden behind untestable
    releases ends the walk (the tried releases still show what is known)."""
    end = len(search.releases) - 1
    kinds = [(search.releases[start], search.run(search.releases[start]))]
    at = start
    while len(kinds) <= MAX_KIND_CHANGES and search.run(search.releases[at]) != search.run(search.releases[end]):
        lo, hi = search.boundary(at, end)
        if search.hidden(lo, hi):
            break
        kinds.append((search.releases[hi], search.run(search.releases[hi])))
        at = hi
    return kinds


def _shows(outcome: str, claim: str) -> bool:
    return outcome != Outcome.OK if claim == NOT_OK else outcome == claim
