"""Scheduler integrations: fan a profile's cells out as shards on a team's Slurm, GitHub Actions or Kubernetes.

Each engine module turns one `Fanout` (pure data: GPU types, shard counts, the `envmatrix run` arguments
every shard repeats) into text: sbatch scripts, a workflow, manifests. Only `slurm` also submits.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..errors import EnvmatrixError, InputError
from ..plan.builds import builds
from ..plan.cells import PLANNED, Cell
from ..plan.shard import cell_cost, shard
from ..spec.matrix import GpuTarget, Scheduler, Spec, check_pattern, default_labels


class SubmitError(EnvmatrixError):
    """The scheduler refused a job or a job did not finish well: nothing is lost, records stay cached."""

    exit_code = 4


# What one shard asks of its host beyond its GPUs. No GPU run has measured these yet (none was lent for it): they
# are sized from what a cell holds on a GPU host: a CUDA context and NCCL per rank, a small model on the GPU but
# loaded through host memory (a 7B one for kernels-7b, 15 GB in bf16), vLLM's host swap space, and a build beside the
# running cells (pip unpacking a CUDA torch, ~3 GB of wheels). Slurm and Kubernetes get them as requests.
CPUS_PER_GPU = 8
MEM_GB_PER_GPU = 32
#: A job of the cpu GPU type: cells share the job's cores (a rank takes one).
CPU_JOB_CPUS = 4
CPU_JOB_MEM_GB = 16
#: Preparing one environment on a GPU runner: a CUDA base and torch's ~3 GB of CUDA wheels, then the stack.
BUILD_MINUTES = 15
#: A GPU cell's start beyond the plan's per-cell estimate (plan/shard.py, measured on CPU): CUDA, NCCL, first kernels.
CELL_START_SECONDS = 60.0
#: The estimate is doubled, plus one cell that runs to its --timeout, rounded up to 10 minutes, at least 30.
MARGIN = 2.0
MIN_MINUTES = 30
#: GitHub ends a self-hosted runner's job after 5 days (its usage limits); a longer estimate asks for more shards.
LONGEST_MINUTES = 5 * 24 * 60


@dataclass(frozen=True)
class Resources:
    """What each shard of one GPU type asks for: GPUs (its largest world size), cores, memory, a time limit."""

    gpus: int
    cpus: int
    mem_gb: int
    minutes: int
    #: What the plan's size gives for `minutes` where the profile's scheduler section sets its own.
    planned_minutes: int = 0

    @property
    def slurm_time(self) -> str:
        """`--time` as Slurm writes it: days-hours:minutes:seconds."""
        days, rest = divmod(self.minutes, 24 * 60)
        return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"


def shard_minutes(cells: tuple[Cell, ...], slots: int, cell_timeout: float) -> int:
    """A shard's time limit from the plan's size: one build per environment with a planned cell, then its planned
    cells' estimated rank-seconds spread over the slots (GPUs, or cores for cpu), doubled, plus one cell that hangs
    until its timeout."""
    planned = [c for c in cells if c.status == PLANNED]
    seconds = float(len(builds(planned)) * BUILD_MINUTES * 60)
    seconds += sum((cell_cost(c) + CELL_START_SECONDS) * c.scenario.world_size for c in planned) / max(1, slots)
    minutes = math.ceil((MARGIN * seconds + cell_timeout) / 600) * 10 if planned else 0
    return max(MIN_MINUTES, minutes)


def resources(gpu: str, target: GpuTarget, shards: tuple[tuple[Cell, ...], ...], cell_timeout: float) -> Resources:
    """A GPU type's requests: the GPUs its widest planned cell needs (at least what the target names), cores and
    memory per GPU, and the time of its heaviest shard; the profile's scheduler section (`cpus`, `memory`,
    `minutes` of the GPU type) overrides each of the last three, for every engine."""
    need = max((c.scenario.world_size for s in shards for c in s if c.status == PLANNED), default=1)
    gpus = 0 if gpu == "cpu" else max(target.gpu_count, need)
    cpus, mem = (gpus * CPUS_PER_GPU, gpus * MEM_GB_PER_GPU) if gpus else (CPU_JOB_CPUS, CPU_JOB_MEM_GB)
    cpus, mem = target.cpus or cpus, target.mem_gb or mem
    planned = max(shard_minutes(s, gpus or cpus, cell_timeout) for s in shards)
    return Resources(gpus, cpus, mem, target.minutes or planned, planned)


@dataclass(frozen=True)
class GpuJob:
    """One GPU type's array: where it runs, the cells each of its shards takes, what each shard asks for (`needs`,
    whose GPUs are at least the target's `gpu_count`)."""

    gpu: str
    target: GpuTarget
    shards: tuple[tuple[Cell, ...], ...]
    needs: Resources

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
    cell_timeout: float = 600.0

    def throttle(self, job: GpuJob) -> int:
        """Shards of one GPU type that may run at once (the `%` of an sbatch array, a Job's parallelism)."""
        return min(self.scheduler.throttle or job.target.shards, job.target.shards)

    def run_argv(self, job: GpuJob, shard_expr: str) -> list[str]:
        """`envmatrix run` arguments for one shard; `shard_expr` is `I/N` or an engine's expression for it."""
        return ["run", "--shard", shard_expr, "--gpu", job.gpu, *self.run_args]

    def name(self, job: GpuJob | None = None) -> str:
        """A job name engines accept (a DNS label, 63 characters at most): `envmatrix-cpu-a100`, `envmatrix-cpu-report`."""
        return re.sub(r"[^a-z0-9-]", "-", f"envmatrix-{self.profile}-{job.key if job else 'report'}".lower())[:63].rstrip("-")


def _safe_argument(flag: str, value: str) -> str:
    problem = check_pattern(value) if flag in ("--only", "--skip") else None
    if problem or not re.fullmatch(r"[A-Za-z0-9._+*?{},/~:=@-]+", value):
        raise InputError(f"{flag} {value!r}: {problem or 'has characters that would need quoting in a job script'}; use names, versions, '*', '?' and {{a,b}}")
    return value


def default_target(gpu: str) -> GpuTarget:
    """Where a GPU type runs when the profile's scheduler section does not say: one shard on runners labelled
    with it (spec/matrix.py's default labels), one GPU (more where a cell's world size asks)."""
    return GpuTarget(gpu_count=0 if gpu == "cpu" else 1, labels=default_labels(gpu))


def fanout(spec: Spec, profile: str, cells: list[Cell], *, run_args: list[str], reports: str, cell_timeout: float = 600.0) -> Fanout:
    """Cut each GPU type's cells into its target's shard count (the profile's scheduler section, else the default
    target) and size each shard's requests from the plan."""
    prof = spec.profiles[profile]
    sched = prof.scheduler or Scheduler(gpus={})
    jobs: list[GpuJob] = []
    for gpu in prof.axes["gpu"]:
        mine = [c for c in cells if c.env.gpu == gpu]
        if not mine:
            continue
        target = sched.gpus.get(gpu) or default_target(gpu)
        shards = tuple(tuple(s) for s in shard(mine, target.shards))
        needs = resources(gpu, target, shards, cell_timeout)
        jobs.append(GpuJob(gpu, target, shards, needs))
    if not jobs:
        raise InputError(f"no cells in profile '{profile}' with this selection; see envmatrix plan --profile {profile}")
    for i in range(0, len(run_args) - 1, 2):
        _safe_argument(run_args[i], run_args[i + 1])
    return Fanout(profile, sched, tuple(jobs), tuple(run_args), _safe_argument("--reports", reports), cell_timeout)


def too_long(f: Fanout) -> list[str]:
    """A line per GPU type whose shards would outlast what a scheduler lets a job run: more shards split it."""
    return [
        f"{job.gpu}: a shard may need {job.needs.minutes // 60} h (more than GitHub's 5-day job limit); "
        f"set profiles.{f.profile}.scheduler.gpus.{job.gpu}.shards above {job.target.shards} to split it"
        for job in f.jobs
        if job.needs.minutes > LONGEST_MINUTES
    ]


def too_short(f: Fanout) -> list[str]:
    """A line per GPU type whose scheduler section sets a time limit below what the plan estimates: shards may be
    ended before their last cells (those cells are simply missing; a later submit runs them)."""
    return [
        f"{job.gpu}: profiles.{f.profile}.scheduler.gpus.{job.gpu}.minutes is {job.needs.minutes}, below the plan's estimate of "
        f"{job.needs.planned_minutes} min per shard: the last cells of a shard may be cut off (more shards, or a longer limit)"
        for job in f.jobs
        if job.needs.minutes < job.needs.planned_minutes
    ]


#: A cron schedule's field: numbers, names (MON, JAN), `*`, ranges, lists and steps; nothing a shell or YAML reads otherwise.
_CRON_FIELD = re.compile(r"[0-9A-Za-z*]+([-/][0-9A-Za-z]+)*(,[0-9A-Za-z*]+([-/][0-9A-Za-z]+)*)*")


def check_cron(text: str) -> str:
    """A five-field cron schedule (minute hour day month weekday), as GitHub's `schedule` and scrontab take it;
    InputError otherwise. It is written into a workflow and a crontab line, so every field is matched in full."""
    fields = text.split()
    if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(f) for f in fields):
        raise InputError(f"--schedule {text!r}: not a cron schedule of five fields (minute hour day month weekday), such as '0 6 * * 1'")
    return " ".join(fields)


@dataclass(frozen=True)
class WatchJob:
    """A scheduled `envmatrix watch`: the arguments it repeats, the GPU type it runs on, where it writes."""

    profile: str
    gpu: str
    target: GpuTarget
    schedule: str
    watch_args: tuple[str, ...]
    reports: str

    @property
    def summary(self) -> str:
        return f"{self.reports}/watch-summary.md"

    def argv(self) -> list[str]:
        """`envmatrix watch` with the profile, the GPU type and the summary file."""
        return ["watch", "--profile", self.profile, "--gpu", self.gpu, *self.watch_args, "--summary", self.summary]

    def issue_title(self) -> str:
        return f"envmatrix watch: a new release breaks profile {self.profile} on {self.gpu}"


def watch_job(spec: Spec, profile: str, gpu: str | None, schedule: str, *, watch_args: list[str], reports: str) -> WatchJob:
    """A scheduled watch of one profile on one GPU type (the profile's only one when --gpu is not given)."""
    prof = spec.profiles[profile]
    gpus = prof.axes["gpu"]
    if gpu is None:
        if len(gpus) != 1:
            raise InputError(f"profile '{profile}' has GPU types {', '.join(gpus)}: name the one whose runners watch with --gpu")
        gpu = gpus[0]
    elif gpu not in gpus:
        raise InputError(f"--gpu {gpu}: profile '{profile}' has no such GPU; it has {', '.join(gpus)}")
    for i in range(0, len(watch_args) - 1, 2):
        _safe_argument(watch_args[i], watch_args[i + 1])
    target = (prof.scheduler.gpus.get(gpu) if prof.scheduler else None) or default_target(gpu)
    return WatchJob(profile, gpu, target, check_cron(schedule), tuple(watch_args), _safe_argument("--reports", reports))


def issue_script(job: WatchJob) -> str:
    """Shell lines that open an issue with the summary when watch exits 1, or comment on the open one with the same
    title (the `gh` CLI, authenticated by GH_TOKEN); the watch's exit status is kept in `$status`."""
    title = quote([job.issue_title()])
    summary = quote([job.summary])
    return "\n".join(
        [
            f"number=$(gh issue list --state open --search {quote([f'in:title {job.issue_title()}'])} --json number,title "
            f"--jq '.[] | select(.title == \"{job.issue_title()}\") | .number' | head -n 1)",
            f'if [ -n "$number" ]; then gh issue comment "$number" --body-file {summary};',
            f"else gh issue create --title {title} --body-file {summary}; fi",
        ]
    )


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
