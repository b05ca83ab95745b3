"""Kubernetes: a Job per environment, in that environment's runner image, and a report Job, sharing one volume.

A runner image (dockerfiles/runner.Dockerfile, built by `envmatrix submit k8s --build`, see runner_image.py) is an
environment's probe image with envmatrix and the matrix file added: its pod runs that environment's cells with the
host backend, in the interpreter that holds the stack under test, so a cluster needs no Docker engine and no
privileges. Records go to the PersistentVolumeClaim; the report Job renders them once the Jobs have completed.

With `--backend docker` the pod instead drives the node's own Docker engine through its socket (hostPath
/var/run/docker.sock): the engine builds the probe images and runs the cells in containers, as on a workstation.
Everything the backend bind-mounts into those containers (the reports folder, TMPDIR's fork-helper sockets) must be
a path the engine sees under the same name, so the reports folder is a hostPath mounted at its own path, never the
claim. The pod still requests its GPUs: the scheduler places it on a node with free ones and the device plugin
gives it those, which are the only ones its nvidia-smi lists, so the runner hands the engine exactly their UUIDs
(host/gpus.py). A docker socket is root on the node: whoever can create these pods owns the node.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
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
#: The node's Docker engine, mounted into a docker-backend pod at the same path (docker-py's default).
DOCKER_SOCKET = "/var/run/docker.sock"
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
    """12 hex over envmatrix's version, its package, probe and Dockerfile files and the matrix file: what a runner image holds
    beside its probe image, so a changed checkout or matrix names new images (a node never runs a stale one)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256(__version__.encode())
    for path in sorted([*(root / "envmatrix").rglob("*"), *(root / "probes").rglob("*"), *(root / "dockerfiles").rglob("*")]):
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


@dataclass(frozen=True)
class DockerSocket:
    """The docker backend in the pods: the node's engine socket (its group id lets the pod's user talk to it) and the
    node folder the reports go to, which the engine and the pod both see at `reports`."""

    gid: int
    reports: str


def _options(run_args: tuple[str, ...]) -> dict[str, str]:
    """The run arguments as the flag → value pairs they were given in (the one reader of them here)."""
    return dict(zip(run_args[::2], run_args[1::2], strict=False))


def backend(f: Fanout) -> str:
    """The backend the pods run their cells with: `docker` when the shards were given `--backend docker`, else host."""
    return "docker" if _options(f.run_args).get("--backend") == "docker" else "host"


def docker_socket(reports: str, gid: int | None) -> DockerSocket:
    """Check what a docker-backend pod needs (InputError otherwise): an absolute node folder for the reports (the
    engine mounts it into cells' containers by that name) and the group id of the nodes' docker.sock."""
    if gid is None:
        raise InputError(
            f"submit k8s --backend docker: give --docker-gid, the group id of {DOCKER_SOCKET} on the GPU nodes "
            f"(stat -c %g {DOCKER_SOCKET}), so the pod's user (uid {UID}) may use the node's engine"
        )
    if not 0 <= gid <= 2**31 - 1:
        raise InputError(f"--docker-gid {gid}: not a group id (0 to 2147483647)")
    path = PurePosixPath(reports)
    if not path.is_absolute() or ".." in path.parts or str(path) == "/":
        raise InputError(
            f"submit k8s --backend docker: --reports {reports!r} must be an absolute folder on the nodes (such as /var/lib/envmatrix): "
            "the engine mounts it into each cell's container by that name, so the pod mounts it (hostPath) at the same path"
        )
    return DockerSocket(gid, str(path))


def _node_selector(f: Fanout, job: GpuJob) -> dict[str, str]:
    if job.target.product:
        return {PRODUCT_LABEL: job.target.product}
    return {GPU_LABEL: label(job.key)}


def _pod(f: Fanout, image: str, command: str, job: GpuJob | None, needs: Resources | None, docker: DockerSocket | None = None) -> dict[str, Any]:
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
    if docker is not None:
        _on_the_engine(spec, container, docker, socket=job is not None)
    return {"metadata": {"labels": {"app.kubernetes.io/name": "envmatrix"}}, "spec": spec}


def _on_the_engine(spec: dict[str, Any], container: dict[str, Any], docker: DockerSocket, *, socket: bool) -> None:
    """A docker-backend pod: the reports folder is the node's (hostPath, same path: the engine mounts it into the
    cells' containers), TMPDIR under it (the fork helper's socket folder is mounted too), and for the cells' pods the
    engine's socket with its group. The folder must exist, writable by uid 1000 (fsGroup does not reach a hostPath)."""
    spec["volumes"][0] = {"name": "reports", "hostPath": {"path": docker.reports, "type": "Directory"}}
    container["volumeMounts"][0] = {"name": "reports", "mountPath": docker.reports}
    container["env"] = [{"name": "TMPDIR", "value": f"{docker.reports}/.tmp"}]
    if socket:
        spec["volumes"].append({"name": "docker-socket", "hostPath": {"path": DOCKER_SOCKET, "type": "Socket"}})
        container["volumeMounts"].append({"name": "docker-socket", "mountPath": DOCKER_SOCKET})
        spec["securityContext"]["supplementalGroups"] = [docker.gid]


def run_command(f: Fanout, job: GpuJob, env: Environment, cells: list[Cell]) -> str:
    """`envmatrix run` of one environment's selected cells with the pods' backend (host, or docker on the node's
    engine, which first makes TMPDIR), into the shared volume or the node folder."""
    scenarios = sorted({c.scenario.name for c in cells})
    if len(scenarios) > MAX_EXPANSIONS:
        raise InputError(f"{env.id}: {len(scenarios)} scenarios selected, more than one pattern holds ({MAX_EXPANSIONS}); select fewer with --only")
    only = f"{env.id}/{{{','.join(scenarios)}}}" if len(scenarios) > 1 else f"{env.id}/{scenarios[0]}"
    argv = ["envmatrix", "run", "--file", MATRIX, "--profile", f.profile, "--gpu", job.gpu, "--only", only, "--backend", backend(f)]
    argv += [*_passed(f.run_args), "--reports", f.reports]
    prepare = 'mkdir -p "$TMPDIR" && ' if backend(f) == "docker" else ""
    return prepare + "exec " + quote(argv)


def _passed(run_args: tuple[str, ...]) -> list[str]:
    """The run arguments every pod repeats (--jobs, --timeout); the file, profile, selection and backend are its own."""
    return [x for flag, value in _options(run_args).items() if flag in ("--jobs", "--timeout") for x in (flag, value)]


def env_job(f: Fanout, job: GpuJob, env: Environment, cells: list[Cell], digest: str, docker: DockerSocket | None = None) -> dict[str, Any]:
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
            "template": _pod(f, image_ref(f, env, digest), run_command(f, job, env, cells), job, needs, docker),
        },
    }


def report_job(f: Fanout, image: str, docker: DockerSocket | None = None) -> dict[str, Any]:
    """Renders the merged report from the shared volume; apply it once the environments' Jobs have finished."""
    command = "exec " + quote(["envmatrix", "report", "--results", f"{f.reports}/results", "--out", f.reports])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f.name(), "labels": {"app.kubernetes.io/name": "envmatrix", "envmatrix/profile": label(f.profile)}},
        "spec": {"backoffLimit": 1, "template": _pod(f, image, command, None, None, docker)},
    }


def images(f: Fanout, digest: str) -> dict[str, Environment]:
    """Runner image reference → the environment it is built from (one per build, whatever GPU type runs it)."""
    return {image_ref(f, env, digest): env for job in f.jobs for env, _cells in environments(job)}


def manifests(f: Fanout, digest: str, docker_gid: int | None = None) -> dict[str, str]:
    """File name → YAML: `jobs.yaml` (a Job per environment) and `report.yaml` (apply after they complete). With the
    docker backend, `docker_gid` is the group of the nodes' docker.sock (docker_socket() checks it and the folder)."""
    docker = docker_socket(f.reports, docker_gid) if backend(f) == "docker" else None
    docs = [env_job(f, job, env, cells, digest, docker) for job in f.jobs for env, cells in environments(job)]
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
        *(
            [
                f"# Docker backend: the pods use each node's engine through {DOCKER_SOCKET} (root on the node: whoever can create them owns it);",
                f"# on every GPU node: Docker with the NVIDIA toolkit, and install -d -o {UID} -g {UID} {f.reports} (on a file system the nodes share,",
                "# or the report Job sees only its own node's records)",
            ]
            if docker
            else []
        ),
        f"# kubectl apply -f jobs.yaml && kubectl wait --for=condition=complete --timeout={wait}m job -l envmatrix/profile={label(f.profile)} "
        "&& kubectl apply -f report.yaml",
        "",
    ]
    jobs = yaml.safe_dump_all(docs, sort_keys=False, width=1000)
    report_image = docs[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    return {"jobs.yaml": "\n".join(head) + jobs, "report.yaml": yaml.safe_dump(report_job(f, report_image, docker), sort_keys=False, width=1000)}
