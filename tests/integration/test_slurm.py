"""A real one-host Slurm (slurmctld + slurmd + munge): submit the cpu profile as arrays, kill a task, re-submit.

This machine has one GPU type (`cpu`), so there is one array; the second partition carries the report job,
so array placement and the report's placement are both exercised. Cells run on the host backend (each
cell's record states what really ran), which keeps the test about scheduling: shards, logs, the
afterany report job, and a re-submission that completes only what a killed task left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

import envmatrix.submit as submit_api
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "munged", "munge")

pytestmark = [pytest.mark.integration]


def _missing() -> str | None:
    absent = [t for t in TOOLS if shutil.which(t) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing): apt-get install -y slurm-wlm munge (.ci/run does)"
    if os.geteuid() != 0:
        return "a one-host Slurm here runs its daemons as root"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _munge_running() -> bool:
    return subprocess.run("munge -n | unmunge", shell=True, capture_output=True, check=False).returncode == 0


def _start_munge() -> None:
    if not _munge_running():
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "munged"], check=True)
        for _ in range(50):
            if _munge_running():
                break
            time.sleep(0.1)


@contextmanager
def one_host_slurm(base: Path, node: str, partitions: list[str], *, extra: tuple[str, ...] = (), gres: str | None = None) -> Iterator[dict[str, str]]:
    """slurmctld and slurmd for this host with a generated configuration (`node`: the NodeName line's resources,
    `partitions`: their names, the first the default; `gres`: a gres.conf); stopped (by pid) at the end."""
    why = _missing()
    if why:
        pytest.skip(why)
    _start_munge()
    host = socket.gethostname().split(".")[0]
    conf = base / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=envmatrix",
                f"SlurmctldHost={host}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "AuthType=auth/munge",
                f"StateSaveLocation={base}/state",
                f"SlurmdSpoolDir={base}/spool",
                f"SlurmctldPidFile={base}/slurmctld.pid",
                f"SlurmdPidFile={base}/slurmd.pid",
                f"SlurmctldLogFile={base}/slurmctld.log",
                f"SlurmdLogFile={base}/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "JobAcctGatherType=jobacct_gather/none",
                "SchedulerType=sched/backfill",
                "SchedulerParameters=sched_min_interval=0,bf_interval=1",
                "SelectType=select/cons_tres",
                "MpiDefault=none",
                "ReturnToService=2",
                "MinJobAge=600",
                *extra,
                f"NodeName={host} {node} State=UNKNOWN",
                *(f"PartitionName={name} Nodes=ALL{' Default=YES' if i == 0 else ''} MaxTime=INFINITE State=UP" for i, name in enumerate(partitions)),
                "",
            ]
        )
    )
    if gres is not None:
        (base / "gres.conf").write_text(gres)
    for d in ("state", "spool"):
        (base / d).mkdir()
    env = {**os.environ, "SLURM_CONF": str(conf)}
    daemons = [subprocess.Popen([d, "-D", "-f", str(conf)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for d in ("slurmctld", "slurmd")]
    try:
        for _ in range(300):
            out = subprocess.run(["sinfo", "-h", "-o", "%P %t"], env=env, capture_output=True, text=True, check=False).stdout
            if all(f"{name}{'*' if i == 0 else ''} idle" in out for i, name in enumerate(partitions)):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"slurm did not come up: {(base / 'slurmctld.log').read_text()[-2000:]}")
        yield env
    finally:
        for proc in daemons:
            proc.terminate()
        for proc in daemons:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


# ---- a GPU node, for sbatch --test-only: the scripts rendered from the repository's own matrix.yaml ------------


def test_the_matrix_files_arrays_are_accepted_by_a_gpu_node(tmp_path: Path) -> None:
    """A node that declares 8 GPUs (gres.conf naming stand-in device files: slurmd accepts only character devices,
    so they are made with /dev/null's numbers), 64 cores and 500 GB (config_overrides: the node is believed, not
    measured); every GPU type's array of `matrix.yaml` asks for GPUs, cores, memory and time, and Slurm's own
    `sbatch --test-only` places it, while the same script asking for a ninth GPU is refused (a real check). Runs
    first in this module, before the cpu cluster's fixture starts."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(8):
        os.mknod(dev / f"nvidia{i}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    extra = ("GresTypes=gpu", "SlurmdParameters=config_overrides", "SelectTypeParameters=CR_Core_Memory")
    out = tmp_path / "jobs"
    done = subprocess.run(
        [sys.executable, "-m", "envmatrix", "submit", "slurm", "--file", str(ROOT / "matrix.yaml"), "--profile", "gpu", "--out", str(out)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    arrays = sorted(out.glob("array-*.sbatch"))
    assert arrays, done.stdout + done.stderr
    for script in arrays:
        text = script.read_text()
        for option in ("--gres=gpu:", "--cpus-per-task=", "--mem=", "--time="):
            assert f"#SBATCH {option}" in text, (script.name, text)
    with one_host_slurm(tmp_path, "CPUs=64 RealMemory=512000 Gres=gpu:8", ["gpu"], extra=extra, gres=f"Name=gpu File={dev}/nvidia[0-7]\n") as env:
        for script in [*arrays, out / "report.sbatch"]:
            done = subprocess.run(["sbatch", "--test-only", str(script)], env=env, capture_output=True, text=True, check=False)
            print(f"sbatch --test-only {script.name}: {done.stderr.strip()}")
            assert done.returncode == 0 and "to start at" in done.stderr, (script.name, done.stderr)
        refused = subprocess.run(["sbatch", "--test-only", "--gres=gpu:9", str(arrays[0])], env=env, capture_output=True, text=True, check=False)
        assert refused.returncode != 0 and "not available" in refused.stderr, refused.stderr


def test_a_teams_own_sizes_from_the_matrix_file_are_accepted_by_a_gpu_node(tmp_path: Path) -> None:
    """The repository's matrix.yaml with a scheduler section that sizes each GPU type itself (cores, memory, minutes,
    account): the arrays carry exactly those, and the same one-host Slurm places them with `sbatch --test-only`, while
    memory beyond the node is refused (the sizes are what Slurm reads, not a comment)."""
    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(8):
        os.mknod(dev / f"nvidia{i}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    data = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    gpus = load(ROOT / "matrix.yaml").profiles["gpu"].axes["gpu"]
    sizes = {"cpus": 12, "memory": "96G", "minutes": 95, "account": "ml-team"}
    data["profiles"]["gpu"]["scheduler"] = {"gpus": {gpu: dict(sizes) for gpu in gpus}}
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "jobs"
    subprocess.run(
        [sys.executable, "-m", "envmatrix", "submit", "slurm", "--file", str(matrix), "--profile", "gpu", "--out", str(out)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    arrays = sorted(out.glob("array-*.sbatch"))
    assert len(arrays) == len(gpus)
    for script in arrays:
        lines = script.read_text().splitlines()
        for line in ("#SBATCH --cpus-per-task=12", "#SBATCH --mem=96G", "#SBATCH --time=0-01:35:00", "#SBATCH --account=ml-team"):
            assert line in lines, (script.name, line)
    extra = ("GresTypes=gpu", "SlurmdParameters=config_overrides", "SelectTypeParameters=CR_Core_Memory")
    with one_host_slurm(tmp_path, "CPUs=64 RealMemory=512000 Gres=gpu:8", ["gpu"], extra=extra, gres=f"Name=gpu File={dev}/nvidia[0-7]\n") as env:
        for script in arrays:
            done = subprocess.run(["sbatch", "--test-only", str(script)], env=env, capture_output=True, text=True, check=False)
            print(f"sbatch --test-only {script.name}: {done.stderr.strip()}")
            assert done.returncode == 0 and "to start at" in done.stderr, (script.name, done.stderr)
        refused = subprocess.run(["sbatch", "--test-only", "--mem=600G", str(arrays[0])], env=env, capture_output=True, text=True, check=False)
        print(f"sbatch --test-only --mem=600G {arrays[0].name}: {refused.stderr.strip()}")
        assert refused.returncode != 0, refused.stderr


# ---- a cpu node: submit, kill, re-submit ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The cpu cluster, two partitions (arrays on cpu-a, the report on cpu-b). The node declares room for both
    shards' requests at once (envmatrix asks 4 cores and 16 GB per cpu task), believed over what this host has."""
    node = f"CPUs={2 * submit_api.CPU_JOB_CPUS} RealMemory={2 * submit_api.CPU_JOB_MEM_GB * 1024}"
    with one_host_slurm(
        tmp_path_factory.mktemp("slurm"), node, ["cpu-a", "cpu-b"], extra=("SelectTypeParameters=CR_Core", "SlurmdParameters=config_overrides")
    ) as env:
        yield env


def installed(name: str) -> str:
    from importlib.metadata import version

    return version(name).split("+")[0]


def write_matrix(folder: Path, steps: int = 4) -> Path:
    """The cpu profile's shape, 2 environments × 2 scenarios, 2 shards on partition cpu-a, the report on cpu-b.
    `steps`: the training scenario's steps (about 0.1 s each here), to keep a shard running long enough to be killed."""
    data: dict[str, Any] = {
        "version": 1,
        "profiles": {
            "cpu": {
                "cuda": ["none"],
                "torch": [installed("torch")],
                "transformers": ["4.51.3", installed("transformers")] if installed("transformers") != "4.51.3" else ["4.51.3", "4.57.6"],
                "flash_attn": ["none"],
                "gpu": ["cpu"],
                "python": [f"{sys.version_info.major}.{sys.version_info.minor}"],
                "scheduler": {"throttle": 2, "report_partition": "cpu-b", "gpus": {"cpu": {"shards": 2, "partition": "cpu-a"}}},
            }
        },
        "scenarios": {"fp32-sdpa": {"steps": steps}, "ctl-zero-grad": {"temperature": 0.01, "top_p": 0.001, "expect": "zero_grad"}},
    }
    path = folder / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def submit(folder: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    args = [sys.executable, "-m", "envmatrix", "submit", "slurm", "--profile", "cpu", "--backend", "host", "--reports", "reports", *extra]
    run_env = {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))}
    return subprocess.Popen(args, cwd=folder, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def planned_ids(folder: Path) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "envmatrix", "plan", "--profile", "cpu", "--format", "json"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {c["id"] for c in json.loads(out)["cells"]}


def record_files(folder: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in (folder / "reports" / "results").glob("*.json")}


def test_arrays_run_every_cell_and_the_report_job_merges_them(slurm: dict[str, str], tmp_path: Path) -> None:
    write_matrix(tmp_path)
    start = time.monotonic()
    proc = submit(tmp_path, slurm, "--submit", "--wait")
    out, _ = proc.communicate(timeout=900)
    print(f"submit --wait: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, out
    assert "report: " in out and (tmp_path / "reports" / "matrix.html").is_file(), out
    rows = json.loads((tmp_path / "reports" / "results.json").read_text())
    assert {r["cell_id"] if "cell_id" in r else r["id"] for r in rows} == planned_ids(tmp_path)
    logs = sorted(p.name for p in (tmp_path / "reports" / "slurm-logs").iterdir())
    assert sum(1 for n in logs if re.fullmatch(r"cpu-\d+_[01]\.log", n)) == 2 and any(n.startswith("report-") for n in logs), logs
    html = (tmp_path / "reports" / "matrix.html").read_text()
    assert all(cid in html for cid in planned_ids(tmp_path))


def test_a_killed_task_is_completed_by_resubmitting_only_its_cells(slurm: dict[str, str], tmp_path: Path) -> None:
    # 80 steps: with 4, a shard whose venvs were cached finished both cells before scancel landed (seen once in CI)
    write_matrix(tmp_path, steps=80)
    start = time.monotonic()
    proc = submit(tmp_path, slurm, "--submit", "--wait")
    assert proc.stdout is not None
    line = ""
    while "submitted:" not in line:
        line = proc.stdout.readline()
        assert line, "submit ended before submitting"
    array = re.search(r"arrays cpu (\d+)", line)
    assert array, line
    victim = f"{array.group(1)}_1"
    for _ in range(600):
        running = subprocess.run(
            ["squeue", "-h", "-t", "R", "-o", "%i", "-j", array.group(1)], env=slurm, capture_output=True, text=True, check=False
        ).stdout.split()
        if victim in running:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"task {victim} never ran")
    subprocess.run(["scancel", victim], env=slurm, check=True)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 4 and f"{victim} (CANCELLED" in out, out
    before = record_files(tmp_path)
    assert len(before) < len(planned_ids(tmp_path)), "the cancelled task left cells without a record"
    proc = submit(tmp_path, slurm, "--submit", "--wait")
    out, _ = proc.communicate(timeout=900)
    print(f"kill + re-submit: {time.monotonic() - start:.1f} s")
    assert proc.returncode == 0, out
    after = record_files(tmp_path)
    assert len(after) == len(planned_ids(tmp_path))
    assert all(after[name] == mtime for name, mtime in before.items()), "a finished cell was run again"
    task_logs = sorted((tmp_path / "reports" / "slurm-logs").glob("cpu-*_0.log"))
    assert "0 cells run" in task_logs[-1].read_text(), "the untouched shard re-ran cells instead of using its records"
