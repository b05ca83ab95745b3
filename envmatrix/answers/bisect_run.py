"""`envmatrix bisect`: the pure bisection (bisect.py) with a real oracle, the Runner.

Each release tried is one ordinary cell (the profile's environment with the bisected axis set to the
release), run and recorded by the Runner into the same results folder as `envmatrix run`: cached
records and prepared venvs are reused, and the report shows every environment bisect built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..backends.registry import BackendOptions, make_backend
from ..errors import InputError
from ..facts.nameindex import canonical
from ..facts.pkgconstraints import needed_packages
from ..facts.releases import available
from ..outputs.drift import drift_label
from ..plan.cells import Environment
from ..plan.eligibility import judge
from ..records.outcomes import Outcome
from ..records.record import Record, Status
from ..run.runner import Paths, Runner
from ..spec.matrix import AXES, AXIS_CHECKS, Profile, Spec, check_package_name, check_package_version
from ..verdict.remedies import freeze_versions, of_record, sentence
from .bisect import NOT_OK, Bisection, bisect, releases_between


@dataclass
class BisectRun:
    """The conclusion, every record it used, and what it cost."""

    result: Bisection
    records: dict[str, Record] = field(default_factory=dict)
    releases: list[str] = field(default_factory=list)
    built: int = 0
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class RunTarget:
    """Where the cells of a follow-up question run (bisect, watch): a profile's cells on one GPU type, one backend,
    one reports folder, as `envmatrix run` would run them."""

    profile: str
    gpu: str
    backend: str
    reports: Path
    venvs: Path
    base: Path
    timeout: float = 600.0
    gpu_ids: tuple[int, ...] = ()  # this host's GPUs of type `gpu` (cli/common.gpu_ids)

    def runner(self, profile: Profile, console: Console) -> Runner:
        """The one Runner these cells go through: records and prepared environments shared with `envmatrix run`."""
        options = BackendOptions(profile_name=self.profile, profile=profile, gpu_count=len(self.gpu_ids), venvs=self.venvs, base=self.base)
        return Runner(make_backend(self.backend, options), Paths(self.reports), timeout=self.timeout, gpus={self.gpu: self.gpu_ids}, console=console)


@dataclass(frozen=True, kw_only=True)
class BisectRequest(RunTarget):
    """What to bisect: an axis between a good and a bad release, for one scenario of one profile,
    other axes held at the values `held` names (else the profile's)."""

    axis: str
    good: str
    bad: str
    scenario: str
    pre: bool = False
    held: dict[str, str] = field(default_factory=dict)
    drift: bool = False  # a cell that trains but whose numbers leave the good release's counts as changed (`drift`)


#: Axes whose values are releases on a package index (cuda, gpu and python are not).
RELEASE_AXES = ("torch", "transformers", "flash_attn")


def bisectable(profile: Profile) -> list[str]:
    """The axes bisect can walk in a profile: torch, transformers, flash-attn and every package axis."""
    return [*RELEASE_AXES, *profile.packages]


def check_held(profile: Profile, held: dict[str, str], axis: str) -> None:
    """`--set AXIS=VALUE`: an environment axis or a package (the profile's or another), a valid value, not the bisected axis."""
    problems = []
    for name, value in held.items():
        if name == axis:
            problems.append(f"--set {name}={value}: {name} is the axis being bisected; drop it or bisect another axis")
        elif name == "gpu":
            problems.append(f"--set gpu={value}: the GPU type is where the cells run, not a release: pass --gpu {value}")
        elif name in AXIS_CHECKS:
            if problem := AXIS_CHECKS[name](value):
                problems.append(f"--set {name}={value}: {problem}")
        elif problem := check_package_name(name) or check_package_version(value):
            problems.append(f"--set {name}={value}: {problem}")
    if problems:
        raise InputError("; ".join(problems))


def base_environment(spec: Spec, req: BisectRequest, console: Console) -> dict[str, str]:
    """Every other axis's value: `--set` first, else the profile's first value; a package the scenario
    needs is never held at none by default (its first release in the profile is taken)."""
    profile = spec.profiles[req.profile]
    needs = needed_packages(spec.scenarios[req.scenario], req.gpu)
    base = {"gpu": req.gpu}
    for axis, values in [*((a, profile.axes[a]) for a in AXES if a != "gpu"), *profile.packages.items()]:
        if axis == req.axis or axis in req.held:
            continue
        chosen = values[0]
        if axis in needs:
            installed = [v for v in values if v != "none"]
            if not installed:
                raise InputError(f"scenario {req.scenario} needs {axis} ({needs[axis]}) and profile '{req.profile}' has only none: pass --set {axis}=VERSION")
            chosen = installed[0]
        base[axis] = chosen
        if len(values) > 1:
            console.print(f"{axis}: the profile has {', '.join(values)}; bisect holds it at {chosen} (--set {axis}=VALUE holds another)")
    for axis, value in req.held.items():
        base[axis] = value
        console.print(f"{axis}: held at {value} (--set)")
    missing = [name for name in needs if name != req.axis and base.get(name, "none") == "none"]
    if missing:
        raise InputError(f"scenario {req.scenario} needs {', '.join(missing)}: pass --set {missing[0]}=VERSION (it cannot run without it)")
    return base


def run_bisect(spec: Spec, req: BisectRequest, console: Console) -> BisectRun:
    """List the releases between good and bad on the index, then bisect with real runs."""
    if req.scenario not in spec.scenarios:
        raise InputError(f"--scenario {req.scenario}: not defined in the matrix file; defined: {', '.join(spec.scenarios)}")
    profile = spec.profiles[req.profile]
    if req.gpu not in profile.axes["gpu"]:
        raise InputError(f"profile '{req.profile}' has no GPU type {req.gpu} (it has {', '.join(profile.axes['gpu'])}); pass --profile or --gpu")
    axes = bisectable(profile)
    if req.axis not in axes and check_package_name(req.axis) is not None:
        raise InputError(f"--axis {req.axis}: cannot bisect it; bisectable axes in profile '{req.profile}': {', '.join(axes)} (or any other package by name)")
    check_held(profile, req.held, req.axis)
    scenario = spec.scenarios[req.scenario]
    base = base_environment(spec, req, console)
    index = available(req.axis, pre=req.pre, cuda=base["cuda"])
    for label, version in (("--good", req.good), ("--bad", req.bad)):
        if version not in index:
            raise InputError(f"{label} {version}: not a {req.axis} release on the index pip uses (newest: {', '.join(index[:5])})")
    releases = releases_between(index, req.good, req.bad, pre=req.pre)
    console.print(f"{req.axis}: {len(releases)} releases from {releases[0]} to {releases[-1]} on the index; scenario {req.scenario} on {req.gpu}")
    runner = req.runner(profile, console)
    run = BisectRun(result=Bisection(), releases=releases)

    def oracle(release: str) -> str:
        env = Environment.from_values({**base, req.axis: release})
        cell = judge(profile, env, scenario, gpu_count=len(req.gpu_ids))
        report = runner.run([cell])
        record = report.records[0]
        run.records[release] = record
        if report.ran and not record.timings.prepare_reused and record.status == Status.DONE:
            run.built += 1
        note = " (cached record)" if report.cached else ""
        label = record.klass
        if req.drift and (good := run.records.get(req.good)) is not None and (seen := drift_label(good, record)) is not None:
            label, note = seen.label, f"{note}; {seen.text}"
        console.print(f"  {req.axis} {release}: {label}{note}  {escape(record.outcome.evidence[:100])}")
        return label

    start = time.monotonic()
    old_is_good = releases[0] == req.good
    run.result = bisect(releases, oracle, expect_old=Outcome.OK if old_is_good else NOT_OK, expect_new=NOT_OK if old_is_good else Outcome.OK)
    run.seconds = round(time.monotonic() - start, 1)
    return run


def boundary_sentence(req: BisectRequest, run: BisectRun) -> str | None:
    """What broke at the first bad release, both sides named, where it is an API mismatch: `trl 0.19.1 asks transformers'
    Qwen2ForCausalLM for `warnings_issued`, which transformers no longer has from 5.1.0: pin transformers < 5.1.0 or move trl
    to a release written for it` (the caller and callee from the cell's log, the versions from its freeze)."""
    res = run.result
    record = run.records.get(res.first) if res.status == "found" and res.first else None
    crossed = of_record(record) if record is not None else None
    if record is None or crossed is None:
        return None
    versions = freeze_versions(record.build.pins() if record.build else ())
    versions.update({canonical(k): v for k, v in req.held.items() if v != "none"})
    newer_breaks = bool(run.releases) and run.releases[0] == req.good
    first_bad = res.first if newer_breaks and canonical(crossed.callee) == canonical(req.axis) else None
    return sentence(crossed, versions, first_bad)


def print_bisect(console: Console, req: BisectRequest, run: BisectRun) -> None:
    """The conclusion in the user's words (where it stops working, and how the failure changes after), each
    side's evidence, and what it cost."""
    res = run.result
    style = "bold green" if res.status == "found" else "bold red"
    console.print(f"[{style}]{res.status}[/]: {escape(res.message)}")
    if res.status == "found" and res.first and res.before:
        held = ", ".join(f"{k} {v}" for k, v in sorted(req.held.items()))
        console.print(f"  {escape(held + ' ' if held else '')}{res.good} on {req.axis} {res.before}; {res.tried[res.first]} from {req.axis} {res.first}")
    said = boundary_sentence(req, run)
    if said:
        console.print(f"  {escape(said)}")
    for label, release in (("before", res.before), *((f"from {r}", r) for r, _ in res.kinds or ([(res.first, "")] if res.first else []))):
        record = run.records.get(release) if release else None
        if record is not None:
            console.print(f"  {label}: {record.id}: {record.klass}")
            console.print(f"    evidence: {escape(record.outcome.evidence)}")
            if record.klass != Outcome.OK:
                console.print(f"    remedy: {escape(record.outcome.remedy)}")
    if res.skipped:
        console.print(f"  could not be installed (skipped): {', '.join(res.skipped)}")
    tried = ", ".join(f"{r}={o}" for r, o in res.tried.items())
    console.print(f"tried {len(res.tried)} of {len(run.releases)} releases ({tried}); {run.built} environments built; {run.seconds} s")
    console.print(f"records: {req.reports / 'results'} (envmatrix report --results {req.reports / 'results'} shows them)")
