"""Scheduler integrations: fan a profile's cells out as shards on a team's Slurm, GitHub Actions or Kubernetes.

Each engine module turns one `Fanout` (pure data: GPU types, shard counts, the `envmatrix run` arguments
every shard repeats) into text: sbatch scripts, a workflow, manifests. Only `slurm` also submits.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvmatrixError, InputError
from ..plan.cells import Cell
from ..plan.shard import shard
from ..spec.matrix import GpuTarget, Scheduler, Spec, check_pattern


class SubmitError(EnvmatrixError):
    """The scheduler refused a job or a job did not finish well: nothing is lost, records stay cached."""

    exit_code = 4


@dataclass(frozen=True)
class GpuJob:
    """One GPU type's array: where it runs and the cells each of its shards takes."""

    gpu: str
    target: GpuTarget
    shards: tuple[tuple[Cell, ...], ...]

    @property
    def key(self) -> str:
        """The GPU type as it appears in job and file names (`a100`, `cpu`)."""
        return self.gpu.lower()


@dataclass(frozen=True)
class Fanout:
    """Everything an engine needs to write its jobs: pure data, no engine specifics."""

    profile: str
    scheduler: Scheduler
    jobs: tuple[GpuJob, ...]
    run_args: tuple[str, ...]
    reports: str

    def throttle(self, job: GpuJob) -> int:
        """Shards of one GPU type that may run at once (the `%` of an sbatch array, a Job's parallelism)."""
        return min(self.scheduler.throttle or job.target.shards, job.target.shards)

    def run_argv(self, job: GpuJob, shard_expr: str) -> list[str]:
        """`envmatrix run` arguments for one shard; `shard_expr` is `I/N` or an engine's expression for it."""
        return ["run", "--shard", shard_expr, "--gpu", job.gpu, *self.run_args]

    def name(self, job: GpuJob | None = None) -> str:
        """A job name engines accept (DNS-label characters): `envmatrix-cpu-a100`, `envmatrix-cpu-report`."""
        return re.sub(r"[^a-z0-9-]", "-", f"envmatrix-{self.profile}-{job.key if job else 'report'}".lower())


def _safe_argument(flag: str, value: str) -> str:
    problem = check_pattern(value) if flag in ("--only", "--skip") else None
    if problem or not re.fullmatch(r"[A-Za-z0-9._+*?{},/~:=@-]+", value):
        raise InputError(f"{flag} {value!r}: {problem or 'has characters that would need quoting in a job script'}; use names, versions, '*', '?' and {{a,b}}")
    return value


def fanout(spec: Spec, profile: str, cells: list[Cell], *, run_args: list[str], reports: str) -> Fanout:
    """Cut each GPU type's cells into its scheduler target's shard count; every planned GPU type needs a target."""
    prof = spec.profiles[profile]
    sched = prof.scheduler or Scheduler(gpus={})
    jobs: list[GpuJob] = []
    for gpu in prof.axes["gpu"]:
        mine = [c for c in cells if c.env.gpu == gpu]
        if not mine:
            continue
        target = sched.gpus.get(gpu, GpuTarget(gpu_count=0 if gpu == "cpu" else 1))
        jobs.append(GpuJob(gpu, target, tuple(tuple(s) for s in shard(mine, target.shards))))
    if not jobs:
        raise InputError(f"no cells in profile '{profile}' with this selection; see envmatrix plan --profile {profile}")
    for i in range(0, len(run_args) - 1, 2):
        _safe_argument(run_args[i], run_args[i + 1])
    return Fanout(profile, sched, tuple(jobs), tuple(run_args), _safe_argument("--reports", reports))


def quote(argv: list[str]) -> str:
    """A shell command line from arguments (each quoted where needed)."""
    return " ".join(shlex.quote(a) for a in argv)


def write_files(folder: Path, files: dict[str, str]) -> list[Path]:
    """Write generated files into `folder` (created), returning their paths in order."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, text in files.items():
        path = folder / name
        path.write_text(text, encoding="utf-8")
        out.append(path)
    return out
