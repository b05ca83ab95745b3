"""Slurm: one `sbatch --array` job per GPU type (a task per shard) and a report job that depends on them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import Fanout, GpuJob, SubmitError, WatchJob, issue_script, propose_step, quote

SHARD = "@SHARD@"
#: The report job reads records and writes HTML: minutes, one core, a few GB (a partition's default time may be shorter).
REPORT_TIME = "0-01:00:00"
REPORT_MEM = "4G"
_DONE = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def logs(f: Fanout) -> str:
    """One log per array task and one for the report job; Slurm does not create this folder itself."""
    return f"{f.reports}/slurm-logs"


def _envmatrix(python: str, argv: list[str]) -> str:
    return quote([python, "-m", "envmatrix", *argv])


def options(job: GpuJob) -> list[tuple[str, str | None]]:
    """The allocation of each task: partition, account and constraint where the profile names them, the GPUs its
    widest cell needs (`--gres=gpu:N`, or the profile's gres), cores, memory and a time limit sized from the plan
    (or the profile's `cpus`, `memory`, `minutes`)."""
    needs = job.needs
    gres = job.target.gres or (f"gpu:{needs.gpus}" if needs.gpus else None)
    return [
        ("partition", job.target.partition),
        ("account", job.target.account),
        ("gres", gres),
        ("constraint", job.target.constraint),
        ("cpus-per-task", str(needs.cpus)),
        ("mem", f"{needs.mem_gb}G"),
        ("time", needs.slurm_time),
    ]


def array_script(f: Fanout, job: GpuJob, *, cwd: str, python: str = sys.executable) -> str:
    """One GPU type's array: task k runs shard k+1 of N into the shared results folder, one log per task."""
    n = job.target.shards
    lines = ["#!/bin/bash", f"#SBATCH --job-name={f.name(job)}", f"#SBATCH --array=0-{n - 1}%{f.throttle(job)}"]
    lines += [f"#SBATCH --{opt}={value}" for opt, value in options(job) if value]
    lines += [f"#SBATCH --output={logs(f)}/{job.key}-%A_%a.log", "", "set -euo pipefail", f"cd {quote([cwd])}"]
    command = _envmatrix(python, f.run_argv(job, SHARD)).replace(SHARD, f'"$((SLURM_ARRAY_TASK_ID + 1))/{n}"')
    return "\n".join([*lines, f"exec {command}", ""])


def report_script(f: Fanout, *, cwd: str, python: str = sys.executable) -> str:
    """The merged report, rendered once every array has ended (afterany: cancelled tasks too)."""
    lines = ["#!/bin/bash", f"#SBATCH --job-name={f.name()}", f"#SBATCH --time={REPORT_TIME}", "#SBATCH --cpus-per-task=1", f"#SBATCH --mem={REPORT_MEM}"]
    if f.scheduler.report_partition:
        lines.append(f"#SBATCH --partition={f.scheduler.report_partition}")
    if f.scheduler.report_account:
        lines.append(f"#SBATCH --account={f.scheduler.report_account}")
    lines += [f"#SBATCH --output={logs(f)}/report-%j.log", "", "set -euo pipefail", f"cd {quote([cwd])}"]
    return "\n".join([*lines, "exec " + _envmatrix(python, ["report", "--results", f"{f.reports}/results", "--out", f.reports]), ""])


def scripts(f: Fanout, *, cwd: str, python: str = sys.executable) -> dict[str, str]:
    """File name → text: the arrays, the report job and submit.sh, which chains them as `--submit` does."""
    files = {f"array-{job.key}.sbatch": array_script(f, job, cwd=cwd, python=python) for job in f.jobs}
    files["report.sbatch"] = report_script(f, cwd=cwd, python=python)
    chain = ["#!/bin/bash", "# Submit the arrays, then the report job once they have all ended.", "set -euo pipefail", 'cd "$(dirname "$0")"']
    chain += [f"mkdir -p {quote([logs(f)])}", 'ids=""']
    chain += [f'id=$(sbatch --parsable {name}); ids="$ids:${{id%%;*}}"' for name in files if name.startswith("array-")]
    chain += ['sbatch --parsable --dependency="afterany$ids" report.sbatch', ""]
    files["submit.sh"] = "\n".join(chain)
    return files


@dataclass(frozen=True)
class Submitted:
    """Job ids: one array per GPU type, then the report job."""

    arrays: dict[str, str]
    report: str


def _sbatch(args: list[str]) -> str:
    exe = shutil.which("sbatch")
    if exe is None:
        raise SubmitError("sbatch not found on PATH: run envmatrix submit slurm on a Slurm login node, or use --dry-run and submit.sh")
    done = subprocess.run([exe, "--parsable", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SubmitError(f"sbatch {' '.join(args)} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip().split(";")[0]


def submit(folder: Path, f: Fanout) -> Submitted:
    """Submit the scripts written in `folder`: arrays first, then the report job depending on all of them."""
    Path(logs(f)).mkdir(parents=True, exist_ok=True)
    arrays = {job.gpu: _sbatch([str(folder / f"array-{job.key}.sbatch")]) for job in f.jobs}
    report = _sbatch([f"--dependency=afterany:{':'.join(arrays.values())}", str(folder / "report.sbatch")])
    return Submitted(arrays, report)


def job_states(job_id: str) -> dict[str, str]:
    """Task id (`123_0`, or `124` for a plain job) → state, from scontrol (no accounting database needed)."""
    done = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=False)
    states: dict[str, str] = {}
    for line in done.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        task = fields.get("ArrayTaskId")
        key = f"{fields.get('ArrayJobId', job_id)}_{task}" if task and task.isdigit() else fields.get("JobId", job_id)
        states[key] = fields.get("JobState", "UNKNOWN")
    return states


def wait(sub: Submitted, *, poll: float = 2.0, say: Callable[[str], None] = print) -> dict[str, str]:
    """Block until the report job has ended (it starts only after every array); return every task's state."""
    unknown = 0
    while True:
        report = job_states(sub.report)
        if report and all(s in _DONE for s in report.values()):
            break
        unknown = 0 if report else unknown + 1
        if unknown * poll > 120:
            raise SubmitError(f"scontrol has not known report job {sub.report} for two minutes (controller down, or the job purged): check squeue and the logs")
        time.sleep(poll)
    states: dict[str, str] = {}
    for jid in sub.arrays.values():
        states.update(job_states(jid))
    states.update(report)
    say("; ".join(f"{k} {v}" for k, v in sorted(states.items())))
    return states


def watch_files(job: WatchJob, *, folder: str, cwd: str, python: str = sys.executable) -> dict[str, str]:
    """A scheduled watch for Slurm's cron (`scrontab`): the job script, and the crontab entry that runs it with the
    GPU type's partition, gres and constraint; on a regression it opens or updates an issue where `gh` is set up."""
    script = [
        "#!/bin/bash",
        f"# envmatrix watch of profile {job.profile} on {job.gpu}, run by scrontab ({job.schedule}).",
        "set -uo pipefail",
        f"cd {quote([cwd])}",
        _envmatrix(python, job.argv()),
        "status=$?",
        f"if [ -f {quote([job.summary])} ]; then cat {quote([job.summary])}; fi",
        *propose_step.slurm_lines(job),  # watch --propose wrote the proposed file beside the summary
        'if [ "$status" = 1 ] && command -v gh >/dev/null 2>&1 && [ -n "${GH_REPO:-}" ]; then',
        issue_script(job),
        "fi",
        'exit "$status"',
        "",
    ]
    gres = job.target.gres or (f"gpu:{job.target.gpu_count}" if job.target.gpu_count else None)
    where = [("partition", job.target.partition), ("account", job.target.account), ("gres", gres), ("constraint", job.target.constraint)]
    scron = [
        "# Append to your crontab for Slurm (scrontab replaces it whole): scrontab -l > mine; cat watch.scrontab >> mine; scrontab mine",
        f"#SCRON --job-name=envmatrix-watch-{job.profile}-{job.gpu.lower()}",
        *(f"#SCRON --{opt}={value}" for opt, value in where if value),
        f"#SCRON --output={job.reports}/slurm-logs/watch-%j.log",
        f"{job.schedule} bash {quote([f'{folder}/watch.sh'])}",
        "",
    ]
    return {"watch.sh": "\n".join(script), "watch.scrontab": "\n".join(scron)}
