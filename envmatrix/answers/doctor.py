"""`envmatrix doctor`: is the environment in hand one of the good ones?

It probes the interpreter it runs in (host backend, through the Runner, so each scenario is a record
like any other) with the profile's scenarios that fit the hardware found: no GPU means the
CPU-capable scenarios only (flash-attention scenarios are left out with the catalog's reason);
world_size > 1 runs over gloo on the CPU where there is no GPU (the probe's CPU DDP, as in the cpu
profile) and needs that many GPUs on a GPU host. It then compares the installed versions
(importlib.metadata) with the vetted environments of the records given: the nearest one and what
differs from it. Exit 0 when every healthy scenario is ok, 1 when one is not (it can gate a training job).
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..backends.host import HostBackend
from ..errors import InputError
from ..facts import catalog
from ..host.gpus import HostGpus
from ..outputs.vetting import vetted_environments
from ..plan.cells import Cell, Environment
from ..plan.eligibility import judge
from ..records.outcomes import Outcome
from ..records.record import Record, Status
from ..run.runner import Paths, Runner
from ..spec.matrix import Spec

#: The axes a vetted environment is compared on (the GPU is compared apart: it is where, not what).
COMPARED = ("cuda", "torch", "transformers", "flash_attn", "python")
_NAME = re.compile(r"[-_.]+")


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return _NAME.sub("-", name).lower()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _public(version: str) -> str:
    """`2.13.0+cpu` → `2.13.0`: the axis value (the local tag is the build, read into `cuda`)."""
    return version.split("+", 1)[0]


def installed_environment(gpus: HostGpus, packages: Iterable[str] = ()) -> Environment:
    """The environment this interpreter is: torch, transformers, flash-attn, CUDA build, GPU, Python, and
    the version of each package axis named in `packages` (`none` where it is not installed)."""
    torch = _version("torch")
    transformers = _version("transformers")
    if torch is None or transformers is None:
        raise InputError(f"{sys.executable} has no {'torch' if torch is None else 'transformers'} installed; doctor probes an environment that trains")
    local = torch.partition("+")[2]
    tagged = catalog.cuda_from_tag(local)
    if tagged is not None:
        cuda = tagged
    elif gpus.count == 0:
        cuda = "none"
    else:
        cuda = _torch_cuda() or "none"
    flash = _version("flash-attn") or _version("flash_attn")
    return Environment(
        cuda=cuda,
        torch=_public(torch),
        transformers=_public(transformers),
        flash_attn=_public(flash) if flash else "none",
        gpu=gpus.matrix_name or "cpu",
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        packages=tuple(sorted((name, _public(v) if (v := _version(name)) else "none") for name in packages)),
    )


def _torch_cuda() -> str | None:
    """torch.version.cuda for a torch without a local tag (PyPI's CUDA builds)."""
    try:
        import torch

        cuda = torch.version.cuda
        return str(cuda) if cuda else None
    except ImportError:
        return None


def installed_pins() -> dict[str, str]:
    """Every installed distribution: normalised name → version."""
    pins: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            pins[normalise(name)] = dist.version
    return pins


def cells_for(spec: Spec, profile: str, env: Environment, only: Iterable[str] = (), *, gpu_count: int | None = None) -> list[Cell]:
    """The profile's scenarios (or `only`) in this environment, judged by the one eligibility as an
    installed environment: what it lacks (hardware, a package a scenario needs, GPUs) is skipped with the reason."""
    names = list(only) or list(spec.profiles[profile].scenarios)
    unknown = [n for n in names if n not in spec.scenarios]
    if unknown:
        raise InputError(f"--scenario {', '.join(unknown)}: not defined in the matrix file; defined: {', '.join(spec.scenarios)}")
    return [judge(spec.profiles[profile], env, spec.scenarios[name], gpu_count=gpu_count, installed=True) for name in names]


@dataclass(frozen=True)
class Nearest:
    """The vetted environment closest to the one in hand, and what differs from it."""

    env: str
    gpu_differs: bool
    axes: tuple[tuple[str, str, str], ...]  # (axis, installed, vetted)
    packages: tuple[tuple[str, str, str], ...]  # (name, installed or "missing", vetted)

    @property
    def identical(self) -> bool:
        return not self.gpu_differs and not self.axes and not self.packages


def nearest_vetted(env: Environment, pins: dict[str, str], records: list[Record]) -> Nearest | None:
    """The vetted environment with the fewest differences: same GPU first, then fewest differing axes,
    then fewest differing frozen packages."""
    here = env.axes()
    best: tuple[tuple[int, int, int], Nearest] | None = None
    for vetted in vetted_environments(records):
        axes = tuple((a, here[a], vetted.cell.axes()[a]) for a in COMPARED if _public(here[a]) != vetted.cell.axes()[a])
        frozen = next((r.build.pins() for r in records if r.env == vetted.env and r.build is not None and r.build.pins()), [])
        packages = []
        for line in frozen:
            name, _, version = line.partition("==")
            mine = pins.get(normalise(name.split("[")[0]))
            if mine is None or _public(mine) != _public(version):
                packages.append((normalise(name), mine or "missing", version))
        candidate = Nearest(vetted.env, vetted.gpu != env.gpu, axes, tuple(packages))
        key = (int(candidate.gpu_differs), len(axes), len(packages))
        if best is None or key < best[0]:
            best = (key, candidate)
    return best[1] if best else None


@dataclass(frozen=True)
class Diagnosis:
    """The doctor's records and the exit status they mean."""

    env: Environment
    records: list[Record]

    @property
    def healthy(self) -> list[Record]:
        return [r for r in self.records if r.workload and r.status != Status.SKIPPED]

    @property
    def exit_code(self) -> int:
        return 0 if all(r.klass == Outcome.OK for r in self.healthy) else 1


def diagnose(cells: list[Cell], gpus: HostGpus, reports: Path | None, *, timeout: float, console: Console) -> Diagnosis:
    """Run the cells in this interpreter (fresh: the interpreter may have changed since any record)."""
    root = reports or Path(tempfile.mkdtemp(prefix="envmatrix-doctor-"))
    env = cells[0].env
    mine = {env.gpu: gpus.types().get(env.gpu, [])}  # a mixed host: the GPUs of this environment's type only
    report = Runner(HostBackend(), Paths(root), rerun=True, timeout=timeout, gpus=mine, console=console).run(cells)
    return Diagnosis(env, report.records)


def print_diagnosis(console: Console, diagnosis: Diagnosis, nearest: Nearest | None, have_records: bool) -> None:
    """Each scenario's verdict, the controls, the exit rule's verdict, and the nearest vetted environment."""
    env = diagnosis.env
    console.print(f"[bold]this environment[/]: {escape(env.id)} ({escape(sys.executable)})")
    for r in diagnosis.records:
        if r.status == Status.SKIPPED:
            console.print(f"  [dim]· {r.cell.scenario}: skipped: {escape(r.outcome.evidence)}[/]")
        elif r.expect:
            style = "dim" if r.control == "reproduced" else "bold red"
            console.print(f"  [{style}]◆ {r.cell.scenario} (control, expects {r.expect}): {r.klass}, {r.control}[/]")
        elif r.klass == Outcome.OK:
            console.print(f"  [green]✓ {r.cell.scenario}: ok[/]")
        else:
            console.print(f"  [bold red]✗ {r.cell.scenario}: {r.klass}[/]: {escape(r.outcome.evidence)}")
            console.print(f"      remedy: {escape(r.outcome.remedy)}")
    healthy = diagnosis.healthy
    bad = [r for r in healthy if r.klass != Outcome.OK]
    verdict = "[bold green]healthy[/]" if not bad else f"[bold red]NOT healthy[/] ({', '.join(r.cell.scenario for r in bad)})"
    console.print(f"verdict: {verdict}: {len(healthy) - len(bad)}/{len(healthy)} healthy scenarios ok")
    if not have_records:
        console.print("vetted environments: none given (pass --results DIR with a matrix run's records to compare)")
    elif nearest is None:
        console.print("vetted environments: the records given vet none")
    elif nearest.identical:
        console.print(f"matches the vetted environment {escape(nearest.env)} exactly (every frozen package)")
    else:
        console.print(f"nearest vetted environment: {escape(nearest.env)} (lock it: envmatrix lock {escape(nearest.env)})")
        if nearest.gpu_differs:
            console.print(f"  vetted on another GPU type than this host's ({env.gpu})")
        for axis, mine, theirs in nearest.axes:
            console.print(f"  {axis}: {mine} here, {theirs} vetted")
        for name, mine, theirs in nearest.packages[:20]:
            console.print(f"  {escape(name)}: {escape(mine)} here, {escape(theirs)} vetted")
        if len(nearest.packages) > 20:
            console.print(f"  … and {len(nearest.packages) - 20} more packages differ")
