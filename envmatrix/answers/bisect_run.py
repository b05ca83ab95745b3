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
from ..facts import catalog
from ..facts.releases import available
from ..plan.cells import PLANNED, SKIPPED, Cell, Environment
from ..records.record import Record
from ..run.runner import Paths, Runner
from ..spec.matrix import AXES, Spec
from .bisect import Bisection, bisect, releases_between


@dataclass
class BisectRun:
    """The conclusion, every record it used, and what it cost."""

    result: Bisection
    records: dict[str, Record] = field(default_factory=dict)
    releases: list[str] = field(default_factory=list)
    built: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class BisectRequest:
    """What to bisect: an axis between a good and a bad release, for one scenario of one profile."""

    axis: str
    good: str
    bad: str
    scenario: str
    profile: str
    gpu: str
    backend: str
    reports: Path
    venvs: Path
    base: Path
    timeout: float = 600.0
    pre: bool = False
    gpu_count: int = 0


def base_environment(spec: Spec, req: BisectRequest, console: Console) -> dict[str, str]:
    """The profile's axis values, the bisected axis aside; the first value where an axis has several."""
    profile = spec.profiles[req.profile]
    base = {}
    for axis in AXES:
        values = profile.axes[axis]
        if axis == "gpu":
            if req.gpu not in values:
                raise InputError(f"profile '{req.profile}' has no GPU type {req.gpu} (it has {', '.join(values)}); pass --profile or --gpu")
            base[axis] = req.gpu
        elif axis != req.axis:
            base[axis] = values[0]
            if len(values) > 1:
                console.print(f"{axis}: the profile has {', '.join(values)}; bisect holds it at {values[0]}")
    return base


def run_bisect(spec: Spec, req: BisectRequest, console: Console) -> BisectRun:
    """List the releases between good and bad on the index, then bisect with real runs."""
    if req.scenario not in spec.scenarios:
        raise InputError(f"--scenario {req.scenario}: not defined in the matrix file; defined: {', '.join(spec.scenarios)}")
    if req.axis not in ("torch", "transformers", "flash_attn"):
        raise InputError(f"--axis {req.axis}: cannot bisect it; bisectable axes: torch, transformers, flash_attn")
    scenario = spec.scenarios[req.scenario]
    base = base_environment(spec, req, console)
    index = available(req.axis, pre=req.pre)
    for label, version in (("--good", req.good), ("--bad", req.bad)):
        if version not in index:
            raise InputError(f"{label} {version}: not a {req.axis} release on the index pip uses (newest: {', '.join(index[:5])})")
    releases = releases_between(index, req.good, req.bad, pre=req.pre)
    console.print(f"{req.axis}: {len(releases)} releases from {releases[0]} to {releases[-1]} on the index; scenario {req.scenario} on {req.gpu}")
    profile = spec.profiles[req.profile]
    options = BackendOptions(profile_name=req.profile, profile=profile, gpu_count=req.gpu_count, venvs=req.venvs, base=req.base)
    runner = Runner(make_backend(req.backend, options), Paths(req.reports), timeout=req.timeout, gpu_count=req.gpu_count, console=console)
    run = BisectRun(result=Bisection(), releases=releases)

    def oracle(release: str) -> str:
        axes = {**base, req.axis: release}
        env = Environment(axes["cuda"], axes["torch"], axes["transformers"], axes["flash_attn"], axes["gpu"], axes["python"])
        reasons = catalog.environment_reasons(**env.axes(), build_from_source=profile.build_from_source)
        reasons += catalog.scenario_reasons(attn=scenario.attn, dtype=scenario.dtype, flash_attn=env.flash_attn, gpu=env.gpu)
        cell = Cell(env, scenario, SKIPPED if reasons else PLANNED, "; ".join(reasons))
        report = runner.run([cell], req.gpu)
        record = report.records[0]
        run.records[release] = record
        if report.ran and not record.timings.prepare_reused and record.status == "done":
            run.built += 1
        note = " (cached record)" if report.cached else ""
        console.print(f"  {req.axis} {release}: {record.klass}{note}  {escape(record.outcome.evidence[:100])}")
        return record.klass

    start = time.monotonic()
    old_is_good = releases[0] == req.good
    run.result = bisect(releases, oracle, expect_old="ok" if old_is_good else "not ok", expect_new="not ok" if old_is_good else "ok")
    run.seconds = round(time.monotonic() - start, 1)
    return run


def print_bisect(console: Console, req: BisectRequest, run: BisectRun) -> None:
    """The conclusion, both sides' evidence, and what it cost."""
    res = run.result
    style = "bold green" if res.status == "found" else "bold red"
    console.print(f"[{style}]{res.status}[/]: {escape(res.message)}")
    for label, release in (("before", res.before), ("first", res.first)):
        record = run.records.get(release) if release else None
        if record is not None:
            console.print(f"  {label}: {record.id}: {record.klass}")
            console.print(f"    evidence: {escape(record.outcome.evidence)}")
            if record.klass != "ok":
                console.print(f"    remedy: {escape(record.outcome.remedy)}")
    if res.skipped:
        console.print(f"  could not be installed (skipped): {', '.join(res.skipped)}")
    tried = ", ".join(f"{r}={o}" for r, o in res.tried.items())
    console.print(f"tried {len(res.tried)} of {len(run.releases)} releases ({tried}); {run.built} environments built; {run.seconds} s")
    console.print(f"records: {req.reports / 'results'} (envmatrix report --results {req.reports / 'results'} shows them)")
