"""Kubernetes: a Job per environment, in that environment's runner image, and a report Job, sharing one volume.

A runner image (dockerfiles/runner.Dockerfile, built by `envmatrix submit k8s --build`, see runner_image.py) is an
environment's probe image with envmatrix and the matrix file added: its pod runs that environment's cells with the
host backend, in the interpreter that holds the stack under test, so a cluster needs no Docker engine and no
privileges. Records go to the PersistentVolumeClaim; the report Job renders them once the Jobs have completed.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import yaml

from .. import __version__
from ..errors import InputError
from ..plan.cells import PLANNED, Cell, Environment
from ..spec.patterns import MAX_EXPANSIONS
from . import Fanout, GpuJob, Resources, quote, resources

MOUNT = "/envmatrix"  # the shared volume: relative --reports folders go here
MATRIX = "/opt/envmatrix/matrix.yaml"  # where the runner image holds the matrix file
REPOSITORY = "envmatrix-runner"  # the runner images' repository when the profile's scheduler names no image
PRODUCT_LABEL = "nvidia.com/gpu.product"
#: The node label a team puts on its GPU nodes when it does not name GPU Feature Discovery's product value.
GPU_LABEL = "envmatrix/gpu"
GPU_RESOURCE = "nvidia.com/gpu"
#: The probe image's user (dockerfiles/steps/user.sh): the pod runs as it, and the volume is made writable to it.
UID = 1000
#: NCCL's shared-memory transport needs more than the 64 MB a container gets: a memory-backed /dev/shm per GPU.
SHM_GB_PER_GPU = 8
_SECURITY = {"privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
_TAG = re.compile(r"[^A-Za-z0-9_.-]")


def repository(f: Fanout) -> str:
    """The runner images' repository: the scheduler's `image` without its tag or digest, else `envmatrix-runner`."""
    image = f.scheduler.image
    if not image:
        return REPOSITORY
    name = image.split("@", 1)[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def source_digest(matrix_file: str) -> str:
    """12 hex over envmatrix's version, its package and probe files and the matrix file: what a runner image holds
    beside its probe image, so a changed checkout or matrix names new images (a node never runs a stale one)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256(__version__.encode())
    for path in sorted([*(root / "envmatrix").rglob("*"), *(root / "probes").rglob("*")]):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    h.update(Path(matrix_file).read_bytes())
    return h.hexdigest()[:12]


def image_ref(f: Fanout, env: Environment, digest: str) -> str:
    """`REPOSITORY:<build id>-<digest>` (a tag holds at most 128 characters)."""
    tag = _TAG.sub("_", env.build_id)[: 127 - len(digest)]
    return f"{repository(f)}:{tag}-{digest}"


def environments(job: GpuJob) -> list[tuple[Environment, list[Cell]]]:
    """A GPU type's environments that have a planned cell, each with its selected cells (skipped ones included)."""
    cells: dict[Environment, list[Cell]] = {}
    for part in job.shards:
        for cell in part:
            cells.setdefault(cell.env, []).append(cell)
    return [(env, mine) for env, mine in cells.items() if any(c.status == PLANNED for c in mine)]


def job_name(f: Fanout, env: Environment) -> str:
    """A DNS label (63 characters at most): profile, GPU type and a hash of the environment id."""
    digest = hashlib.sha256(env.id.encode()).hexdigest()[:10]
    head = re.sub(r"[^a-z0-9-]", "-", f"envmatrix-{f.profile}-{env.gpu}".lower())[: 63 - len(digest) - 1]
    return f"{head}-{digest}"


def label(value: str) -> str:
    """A label value Kubernetes takes (63 characters, alphanumeric at both ends) from a profile or GPU name."""
    return value[:63].strip("-_.") or "none"


def _node_selector(f: Fanout, job: GpuJob) -> dict[str, str]:
    if job.target.product:
        return {PRODUCT_LABEL: job.target.product}
    return {GPU_LABEL: label(job.key)}


def _pod(f: Fanout, image: str, command: str, job: GpuJob | None, needs: Resources | None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": str(needs.cpus), "memory": f"{needs.mem_gb}Gi"} if needs else {"cpu": "1", "memory": "4Gi"}
    limits: dict[str, str] = {"memory": requests["memory"]}
    if needs and needs.gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(needs.gpus)
    shm = f"{SHM_GB_PER_GPU * max(1, needs.gpus if needs else 0)}Gi"
    container: dict[str, Any] = {
        "name": "envmatrix",
        "image": image,
        "imagePullPolicy": "IfNotPresent",  # the tag names its content (runner_image.py): never a stale image
        "command": ["/bin/sh", "-c", command],
        "resources": {"requests": requests, "limits": limits},
        "securityContext": _SECURITY,
        "volumeMounts": [{"name": "reports", "mountPath": MOUNT}, {"name": "dshm", "mountPath": "/dev/shm"}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        # the probe image's user; fsGroup makes the volume's files its group's, so a fresh claim is writable
        "securityContext": {"runAsUser": UID, "runAsGroup": UID, "fsGroup": UID, "runAsNonRoot": True},
        "containers": [container],
        "volumes": [
            {"name": "reports", "persistentVolumeClaim": {"claimName": f.scheduler.volume_claim}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}},
        ],
    }
    if job is not None and job.gpu != "cpu":
        spec["nodeSelector"] = _node_selector(f, job)
    return {"metadata": {"labels": {"app.kubernetes.io/name": "envmatrix"}}, "spec": spec}


def run_command(f: Fanout, job: GpuJob, env: Environment, cells: list[Cell]) -> str:
    """`envmatrix run` of one environment's selected cells with the host backend, into the shared volume."""
    scenarios = sorted({c.scenario.name for c in cells})
    if len(scenarios) > MAX_EXPANSIONS:
        raise InputError(f"{env.id}: {len(scenarios)} scenarios selected, more than one pattern holds ({MAX_EXPANSIONS}); select fewer with --only")
    only = f"{env.id}/{{{','.join(scenarios)}}}" if len(scenarios) > 1 else f"{env.id}/{scenarios[0]}"
    argv = ["envmatrix", "run", "--file", MATRIX, "--profile", f.profile, "--gpu", job.gpu, "--only", only, "--backend", "host"]
    argv += [*_passed(f.run_args), "--reports", f.reports]
    return "exec " + quote(argv)


def _passed(run_args: tuple[str, ...]) -> list[str]:
    """The run arguments every pod repeats (--jobs, --timeout); the file, profile, selection and backend are its own."""
    pairs = [(run_args[i], run_args[i + 1]) for i in range(0, len(run_args) - 1, 2)]
    return [x for flag, value in pairs if flag in ("--jobs", "--timeout") for x in (flag, value)]


def env_job(f: Fanout, job: GpuJob, env: Environment, cells: list[Cell], digest: str) -> dict[str, Any]:
    """One environment's cells in one pod with the GPUs, cores, memory and time the plan gives them (a Job retried
    once: the records it wrote are kept, the retry runs what is missing)."""
    needs = resources(job.gpu, job.target, (tuple(cells),), f.cell_timeout)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(f, env),
            "labels": {"app.kubernetes.io/name": "envmatrix", "envmatrix/gpu": label(job.key), "envmatrix/profile": label(f.profile)},
            "annotations": {"envmatrix/environment": env.id},
        },
        "spec": {
            "backoffLimit": 1,
            "activeDeadlineSeconds": needs.minutes * 60,
            "template": _pod(f, image_ref(f, env, digest), run_command(f, job, env, cells), job, needs),
        },
    }


def report_job(f: Fanout, image: str) -> dict[str, Any]:
    """Renders the merged report from the shared volume; apply it once the environments' Jobs have finished."""
    command = "exec " + quote(["envmatrix", "report", "--results", f"{f.reports}/results", "--out", f.reports])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f.name(), "labels": {"app.kubernetes.io/name": "envmatrix", "envmatrix/profile": label(f.profile)}},
        "spec": {"backoffLimit": 1, "template": _pod(f, image, command, None, None)},
    }


def images(f: Fanout, digest: str) -> dict[str, Environment]:
    """Runner image reference → the environment it is built from (one per build, whatever GPU type runs it)."""
    return {image_ref(f, env, digest): env for job in f.jobs for env, _cells in environments(job)}


def manifests(f: Fanout, digest: str) -> dict[str, str]:
    """File name → YAML: `jobs.yaml` (a Job per environment) and `report.yaml` (apply after they complete)."""
    docs = [env_job(f, job, env, cells, digest) for job in f.jobs for env, cells in environments(job)]
    if not docs:
        raise InputError(f"profile '{f.profile}': no environment with a planned cell in this selection; see envmatrix plan --profile {f.profile}")
    wait = max(j.needs.minutes for j in f.jobs)
    head = [
        f"# Runner images: envmatrix submit k8s --build, then push them ({repository(f)}:*) where the cluster pulls from.",
        *(
            f"# {job.gpu} nodes: kubectl label nodes NODE {GPU_LABEL}={job.key} (or set the profile's scheduler.gpus.{job.gpu}.product)"
            for job in f.jobs
            if job.gpu != "cpu" and not job.target.product
        ),
        f"# kubectl apply -f jobs.yaml && kubectl wait --for=condition=complete --timeout={wait}m job -l envmatrix/profile={label(f.profile)} "
        "&& kubectl apply -f report.yaml",
        "",
    ]
    jobs = yaml.safe_dump_all(docs, sort_keys=False, width=1000)
    report_image = docs[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    return {"jobs.yaml": "\n".join(head) + jobs, "report.yaml": yaml.safe_dump(report_job(f, report_image), sort_keys=False, width=1000)}
