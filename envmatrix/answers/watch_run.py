"""`envmatrix watch` with real runs: the index's releases beyond the baseline, the cells that try them through the
one Runner (records in the results folder like any run's), the bisection of what changed, the upgrade order.

A cell already recorded with the same inputs is never run again, whatever its outcome (a build that failed
stays failed until the index changes what resolves): an unchanged second watch runs nothing and gives the
same answer, the index listings aside. Only the newest release of each axis and the bisection points are
tried; the summary says so.
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from rich.console import Console
from rich.markup import escape

from ..errors import BackendError, InputError
from ..facts import pkgconstraints
from ..facts.releases import PACKAGES, list_releases, torch_sources
from ..host.pipconfig import read_pip_settings
from ..jsonio import read_json, write_json_atomic
from ..plan.cells import Environment
from ..plan.eligibility import environment_reasons, judge
from ..records.record import Record, RecordError, inputs_hash, read_record
from ..run.runner import Runner
from ..spec.matrix import AXES, Profile, Spec
from ..verdict.boundary import Boundary
from ..verdict.remedies import culprit, of_record
from .bisect import bisect
from .bisect_run import RunTarget
from .watch import RELEASE_AXES, AxisWatch, Order, Regression, Try, Watch, affects, candidates, changed, healthy, order_text, untestable, with_axis

#: What to watch: a profile's baseline on one GPU type, run by one backend into one reports folder.
WatchRequest = RunTarget


class Cells:
    """Runs cells through the Runner, reusing any record with the same inputs (whatever its outcome)."""

    def __init__(self, spec: Spec, profile: Profile, runner: Runner, gpu_count: int) -> None:
        self.spec = spec
        self.profile = profile
        self.runner = runner
        self.gpu_count = gpu_count
        self.ran = 0
        self.cached = 0

    def recorded(self, cell_id: str, inputs: str) -> Record | None:
        try:
            record = read_record(self.runner.record_path(cell_id))
        except RecordError:
            return None
        return record if record.inputs == inputs else None

    def run(self, env: Environment, scenarios: list[str]) -> dict[str, Record]:
        """The record of each scenario in `env`: recorded ones as they are, the rest run now."""
        cells = [judge(self.profile, env, self.spec.scenarios[s], gpu_count=self.gpu_count or None) for s in scenarios]
        out: dict[str, Record] = {}
        todo = []
        for cell in cells:
            found = self.recorded(cell.id, inputs_hash(cell, self.runner.probe_source, self.runner.backend.name))
            if found is not None:
                out[cell.scenario.name] = found
                self.cached += 1
            else:
                todo.append(cell)
        if todo:
            report = self.runner.run(todo)
            self.ran += report.ran
            self.cached += report.cached
            for record in report.records:
                out[record.cell.scenario] = record
        return {s: out[s] for s in scenarios if s in out}  # in the profile's order, however they came: one summary for one answer


def baseline_environment(profile: Profile, gpu: str) -> Environment:
    """The profile's baseline: the first value of every axis (init writes one), on the GPU type watched."""
    if gpu not in profile.axes["gpu"]:
        raise InputError(f"profile '{profile.name}' has no GPU type {gpu} (it has {', '.join(profile.axes['gpu'])}); pass --gpu")
    values = {axis: profile.axes[axis][0] for axis in AXES}
    several = [axis for axis in (*AXES, *profile.packages) if axis != "gpu" and len({**profile.axes, **profile.packages}[axis]) > 1]
    if several:
        raise InputError(
            f"profile '{profile.name}' has several values for {', '.join(several)}: watch starts from one baseline per axis "
            "(envmatrix init writes such a profile)"
        )
    return Environment.from_values({**values, "gpu": gpu, **{name: versions[0] for name, versions in profile.packages.items()}})


class Metadata:
    """What releases declare they need (Requires-Dist), for the package axes: the data file's releases
    (facts/pkgconstraints.json) and, for a release it does not know, its wheel's METADATA read once (pip
    download --no-deps, pip's index settings; an sdist's PKG-INFO where there is no wheel) and kept in a cache
    file, so a second watch reads nothing from the index but the listings."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.fetched: dict[tuple[str, str], pkgconstraints.Release] = {}
        self.failed: set[tuple[str, str]] = set()
        data = read_json(cache) or {}
        for pin, facts in data.items():
            name, _, version = pin.partition("==")
            try:
                self.fetched[(name, version)] = pkgconstraints.Release(
                    name, version, tuple(facts["requires_dist"]), facts.get("requires_python"), facts["wheel"], facts["sha256"]
                )
            except (KeyError, TypeError):
                continue

    def known(self) -> dict[tuple[str, str], pkgconstraints.Release]:
        return {**pkgconstraints.releases(), **self.fetched}

    def read(self, name: str, version: str) -> None:
        """Read one release's metadata unless it is known (or could not be read this run)."""
        key = (name, version)
        if key in self.known() or key in self.failed:
            return
        try:
            with tempfile.TemporaryDirectory() as tmp:
                got = pkgconstraints.fetch([f"{name}=={version}"], Path(tmp), read_pip_settings().index_url or pkgconstraints.PYPI)
        except (OSError, subprocess.SubprocessError, StopIteration, KeyError, ValueError, tarfile.TarError, zipfile.BadZipFile):
            self.failed.add(key)
            return
        for dist, versions in got.items():
            for v, facts in versions.items():
                self.fetched[(dist, v)] = pkgconstraints.Release(
                    dist, v, tuple(facts["requires_dist"]), facts.get("requires_python"), facts["wheel"], facts["sha256"]
                )
                self.cache.parent.mkdir(parents=True, exist_ok=True)
                old = read_json(self.cache) or {}
                write_json_atomic(self.cache, {**old, f"{dist}=={v}": facts})

    def reasons(self, profile: Profile, env: Environment) -> list[str]:
        """Why an environment cannot install: the one eligibility (catalog, the data file), then the metadata read here."""
        return [r.text for r in environment_reasons(profile, env)] + pkgconstraints.environment_reasons(env, known=self.fetched)


def _release(name: str, version: str, facts: dict[str, Any]) -> pkgconstraints.Release:
    """A release's facts as pkgconstraints.fetch gives them (and the cache keeps them)."""
    return pkgconstraints.Release(name, version, tuple(facts["requires_dist"]), facts.get("requires_python"), facts["wheel"], facts["sha256"])


#: Releases of one package axis whose metadata a watch reads looking for the newest that installs (a bisection
#: over 256 releases reads 9).
MAX_METADATA_READS = 9


def axis_releases(profile: Profile, base: Environment, axis: str, metadata: Metadata) -> AxisWatch:
    """The axis's installable releases beyond the baseline, from the indexes pip uses; the catalog and the packages'
    metadata rule out what cannot install (each with its reason), reading the metadata of up to MAX_METADATA_READS
    releases the data file does not know."""
    baseline = base.axes().get(axis) or base.package(axis)
    watched = AxisWatch(axis, baseline)
    dist = PACKAGES.get(axis, axis)
    local, extra = torch_sources(base.cuda) if dist == "torch" else (None, [])
    listing = list_releases(dist, local=local, extra=extra)
    if not listing.reachable:
        watched.unreachable = True
        watched.problem = "no index answered: " + "; ".join(f"{k}: {v}" for k, v in listing.problems.items())
        return watched
    beyond = [r for r in listing.versions(python=base.python) if Version(r) > Version(baseline)]
    watched.latest = beyond[-1] if beyond else None
    watched.listed = len(beyond)
    reads = [0]

    def why_not(release: str, *, read: bool = True) -> str | None:
        if read and axis not in AXES and reads[0] < MAX_METADATA_READS and (axis, release) not in metadata.known():
            metadata.read(axis, release)
            reads[0] += 1
        reasons = metadata.reasons(profile, with_axis(base, {axis: release}))
        if reasons:
            watched.ruled_out[release] = "; ".join(reasons)
        return watched.ruled_out[release] if reasons else None

    # The newest that installs: the newest itself, else a bisection over the releases' metadata (a release needs
    # what the one before it needed, or more), so an axis with a hundred releases reads about seven.
    lo, hi = -1, len(beyond) - 1
    if beyond and why_not(beyond[-1]) is None:
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if why_not(beyond[mid]) is None:
            lo = mid
        else:
            hi = mid
    watched.newest = beyond[lo] if lo >= 0 else None
    watched.newer = [r for r in beyond[: lo + 1] if r == watched.newest or why_not(r, read=False) is None]
    if watched.newest is None:
        unreachable = f" (not reachable: {'; '.join(f'{k}: {v}' for k, v in listing.problems.items())})" if listing.problems else ""
        if beyond:
            newest = f"{beyond[-1]}: {watched.ruled_out.get(beyond[-1])}"
            watched.problem = f"none of the {len(beyond)} releases beyond {baseline} installs with the rest of the baseline ({newest})"
        else:
            watched.problem = f"no release beyond {baseline} on the indexes{unreachable}"
    return watched


def run_watch(spec: Spec, req: WatchRequest, console: Console) -> Watch:
    """The whole watch: baseline, each axis's newest, all newest together, bisections, upgrade orders."""
    start = time.monotonic()
    profile = spec.profiles[req.profile]
    base = baseline_environment(profile, req.gpu)
    runner = req.runner(profile, console)
    cells = Cells(spec, profile, runner, len(req.gpu_ids))
    metadata = Metadata(req.venvs.parent / "cache" / "package-metadata.json")
    scenarios = list(profile.scenarios)
    w = Watch(req.profile, req.gpu, base, scenarios)
    if req.backend == "host":
        _check_host_is_baseline(base)
        w.notes.append("host backend: only the baseline ran (in this interpreter); the releases beyond it need the venv or docker backend")
    names = [a for a in RELEASE_AXES if base.axes()[a] != "none"] + [p for p, v in base.packages if v != "none"]
    w.axes = [axis_releases(profile, base, axis, metadata) for axis in names]
    if all(a.unreachable for a in w.axes):
        raise BackendError("no index answered for any axis: " + "; ".join(f"{a.axis}: {a.problem}" for a in w.axes) + "; check pip's index settings")
    console.print(f"baseline {escape(base.id)}: {', '.join(scenarios)}")
    w.baseline = cells.run(base, scenarios)
    if all(untestable(r) for r in w.baseline.values()):
        first = next(iter(w.baseline.values()))
        raise BackendError(f"the baseline environment {base.id} could not be made ({first.klass}: {first.outcome.evidence[:300]}); see {first.log.path}")
    if req.backend == "host":  # this interpreter is the baseline: the releases beyond it are listed, never run in it
        w.listed_only = True
        return _done(w, cells, start)
    for watched in w.axes:
        if watched.newest is None:
            console.print(f"{watched.axis} {watched.baseline}: {escape(watched.problem or '')}")
            continue
        console.print(f"{watched.axis}: {watched.listed} releases beyond {watched.baseline}; trying the newest that installs on the baseline, {watched.newest}")
        affected = [s for s in scenarios if affects(watched.axis, spec.scenarios[s], w.base.gpu)]
        watched.records = cells.run(with_axis(base, {watched.axis: watched.newest}), affected)
    newest = {a.axis: a.latest for a in w.axes if a.latest}
    if len(newest) > 1:
        w.all_newest_env = with_axis(base, {k: str(v) for k, v in newest.items()})
        console.print(f"all newest together: {escape(w.all_newest_env.id)}")
        w.all_newest = cells.run(w.all_newest_env, scenarios)
    _regressions(w, spec)
    for reg in _to_bisect(w):
        _bisect(w, reg, cells, console)
    for reg in _to_bisect(w):
        if reg.broke:
            w.orders.append(_order(w, spec, reg, cells, metadata, console))
    return _done(w, cells, start)


def _done(w: Watch, cells: Cells, start: float) -> Watch:
    w.ran, w.cached, w.seconds = cells.ran, cells.cached, round(time.monotonic() - start, 1)
    return w


def _check_host_is_baseline(base: Environment) -> None:
    """The host backend runs every cell in this interpreter: watch takes it only where this interpreter is the baseline."""
    from ..host.gpus import detect_gpus
    from .doctor import installed_environment

    here = installed_environment(detect_gpus(), [name for name, _ in base.packages])
    if here != base:
        raise InputError(
            f"--backend host runs the cells in this interpreter, which is {here.id}, not the baseline {base.id}: "
            "run watch with the venv or docker backend, or from the environment init --current read"
        )


def _regressions(w: Watch, spec: Spec) -> None:
    for watched in w.axes:
        for scenario, record in watched.records.items():
            verdict = changed(w.baseline[scenario], record)
            if verdict is not None:
                w.regressions.append(Regression(watched.axis, scenario, w.baseline[scenario].klass, str(watched.newest), record.klass, broke=verdict))


def _to_bisect(w: Watch) -> list[Regression]:
    """One change per axis is bisected: a break before a fix, a healthy scenario before a control."""
    chosen: dict[str, Regression] = {}
    for reg in sorted(w.regressions, key=lambda r: (not r.broke, w.baseline[r.scenario].expect is not None)):
        chosen.setdefault(reg.axis, reg)
    return list(chosen.values())


def _bisect(w: Watch, reg: Regression, cells: Cells, console: Console) -> None:
    watched = next(a for a in w.axes if a.axis == reg.axis)
    releases = [watched.baseline, *watched.newer]
    console.print(f"bisecting {reg.axis} {watched.baseline} → {reg.newest} ({len(releases)} releases) for {reg.scenario}")

    def oracle(release: str) -> str:
        record = cells.run(with_axis(w.base, {reg.axis: release}), [reg.scenario])[reg.scenario]
        reg.records[release] = record
        console.print(f"  {reg.axis} {release}: {record.klass}")
        return record.klass

    reg.bisection = bisect(releases, oracle)


def _order(w: Watch, spec: Spec, reg: Regression, cells: Cells, metadata: Metadata, console: Console) -> Order:
    """Which other upgrades let the breaking axis's newest train: each other axis's newest on the index beside it,
    with what that release requires (one run each); then every axis at its newest (already run)."""
    scenario = spec.scenarios[reg.scenario]
    tries: list[Try] = []
    tried: list[tuple[dict[str, str], str]] = []
    crossed = _boundary(w, reg)
    caller = crossed.caller if crossed is not None and crossed.caller not in ("", "user") else None
    if crossed is not None and caller:
        console.print(f"  the verdict names {caller} as the caller of {crossed.callee or crossed.name}: it is tried first")
    first: Record | None = None
    for other in candidates(w, reg, scenario, caller, crossed.callee if crossed is not None else None):
        assert other.latest is not None
        moved = required({reg.axis: reg.newest, other.axis: other.latest}, w, metadata.known())
        record = _attempt(w, reg, cells, moved, tries, tried)
        first = first or record
        console.print(f"  {reg.axis} {reg.newest} with {', '.join(f'{k} {v}' for k, v in moved.items() if k != reg.axis)}: {record.klass}")
    if first is not None and not any(t.outcome == "ok" for t in tries):
        _follow(w, reg, cells, metadata, first, tries, tried, console)
    together = w.all_newest.get(reg.scenario)
    text, works = order_text(reg.axis, reg.scenario, tries, _as(together) if together else None, caller)
    return Order(reg.axis, reg.scenario, text, works, tried)


def _attempt(w: Watch, reg: Regression, cells: Cells, moved: dict[str, str], tries: list[Try], tried: list[tuple[dict[str, str], str]]) -> Record:
    """One try of the upgrade order: the breaking scenario with `moved` (everything else at the baseline), recorded as
    a Try (with what each moved axis showed on the baseline alone) and in `tried`; its record."""
    by_axis = {a.axis: a for a in w.axes}
    record = cells.run(with_axis(w.base, moved), [reg.scenario])[reg.scenario]
    outcome = _as(record) if record.klass != "skipped" else f"cannot install: {record.outcome.evidence[:200]}"
    tries.append(Try(moved, outcome, {k: _alone(by_axis[k], v, reg.scenario) for k, v in moved.items() if k != reg.axis}))
    tried.append((moved, record.klass))
    return record


def _follow(
    w: Watch, reg: Regression, cells: Cells, metadata: Metadata, record: Record, tries: list[Try], tried: list[tuple[dict[str, str], str]], console: Console
) -> None:
    """No single other upgrade is enough: follow the boundaries. From the first try (the named caller's; `record` is
    its cell), move next the package the new failure's verdict names (the caller of its API mismatch, or what imports a
    module no longer installed), and run again, until it trains or names no axis still at the baseline (peft, then trl:
    transformers 5 needs both). Each run is one more try; the fewest axes that train are said as before."""
    moved = dict(tries[0].moved)
    for _ in range(len(w.axes)):
        named = canonicalize_name(culprit(record))
        axis = next((a for a in w.axes if a.latest is not None and canonicalize_name(a.axis) == named), None)
        if axis is None or axis.latest is None or axis.axis in moved:
            return
        moved = required({**moved, axis.axis: axis.latest}, w, metadata.known())
        console.print(f"  the verdict there names {axis.axis}: {reg.axis} {reg.newest} with {', '.join(f'{k} {v}' for k, v in moved.items() if k != reg.axis)}")
        record = _attempt(w, reg, cells, moved, tries, tried)
        console.print(f"    {record.klass}")
        if tries[-1].outcome == "ok":
            return


def _boundary(w: Watch, reg: Regression) -> Boundary | None:
    """The call boundary the break shows: from the first bad release's record where the bisection found one, else from
    the breaking axis's newest."""
    first = reg.bisection.first if reg.bisection is not None else None
    record = reg.records.get(first) if first else None
    if record is None:
        record = next((a.records.get(reg.scenario) for a in w.axes if a.axis == reg.axis), None)
    return of_record(record) if record is not None else None


def _alone(watched: AxisWatch, release: str, scenario: str) -> str:
    """What an axis's release showed on the baseline alone: its run's outcome where it was the one tried, else why
    it cannot install there, else that it was not tried."""
    record = watched.records.get(scenario)
    if release == watched.newest and record is not None:
        return _as(record)
    if release in watched.ruled_out:
        return f"cannot install: {watched.ruled_out[release]}"
    return "not tried"


def required(moved: dict[str, str], w: Watch, known: dict[tuple[str, str], pkgconstraints.Release]) -> dict[str, str]:
    """`moved` with every other axis its moved packages require at a newer release (their wheels' Requires-Dist,
    facts/pkgconstraints) set to that axis's newest: trl 1.16.0 brings accelerate ≥ 1.10.1 along."""
    latest = {a.axis: a.latest for a in w.axes if a.latest}
    out = dict(moved)
    for _ in range(len(latest)):
        env = with_axis(w.base, out)
        needed: dict[str, str] = {}
        for name, version in out.items():
            release = known.get((name, version))
            for line in release.requires if release else ():
                req = Requirement(line)
                axis = str(canonicalize_name(req.name))
                have = env.package(axis) if axis not in AXES else env.axes()[axis]
                if axis in latest and axis not in out and not req.specifier.contains(have, prereleases=True):
                    needed[axis] = str(latest[axis])
        if not needed:
            break
        out |= needed
    return out


def _as(record: Record) -> str:
    """`ok` where the cell shows what it should (a control its expected class), else its outcome."""
    return "ok" if healthy(record) else record.klass
