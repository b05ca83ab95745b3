"""Kubernetes: one Indexed Job per GPU type (a completion per shard) and a report Job, sharing one volume."""

from __future__ import annotations

from typing import Any

import yaml

from ..errors import InputError
from . import Fanout, GpuJob, quote

MOUNT = "/envmatrix"  # the shared volume: relative --reports folders go here
PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_RESOURCE = "nvidia.com/gpu"
_SECURITY = {"privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _image(f: Fanout) -> str:
    if not f.scheduler.image:
        raise InputError(f"profiles.{f.profile}.scheduler.image: not set; name the probe image the Jobs run (a registry your cluster can pull)")
    return f.scheduler.image


def _pod(f: Fanout, command: str, job: GpuJob | None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "envmatrix",
        "image": _image(f),
        "command": ["/bin/sh", "-c", command],
        "securityContext": _SECURITY,
        "volumeMounts": [{"name": "reports", "mountPath": MOUNT}],
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [{"name": "reports", "persistentVolumeClaim": {"claimName": f.scheduler.volume_claim}}],
    }
    if job is not None and job.target.gpu_count:
        count = str(job.target.gpu_count)
        container["resources"] = {"limits": {GPU_RESOURCE: count}, "requests": {GPU_RESOURCE: count}}
    if job is not None and job.gpu != "cpu":
        if not job.target.product:
            raise InputError(
                f"profiles.{f.profile}.scheduler.gpus.{job.gpu}.product: not set; give the {PRODUCT_LABEL} label value, e.g. NVIDIA-A100-SXM4-80GB"
            )
        spec["nodeSelector"] = {PRODUCT_LABEL: job.target.product}
    return {"metadata": {"labels": {"app.kubernetes.io/name": "envmatrix"}}, "spec": spec}


def indexed_job(f: Fanout, job: GpuJob) -> dict[str, Any]:
    """Completion index k runs shard k+1 of N (JOB_COMPLETION_INDEX is set by the Job controller)."""
    n = job.target.shards
    command = "exec " + quote(["envmatrix", *f.run_argv(job, "@SHARD@")]).replace("@SHARD@", f'"$((JOB_COMPLETION_INDEX + 1))/{n}"')
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f.name(job), "labels": {"app.kubernetes.io/name": "envmatrix", "envmatrix/gpu": job.key}},
        "spec": {"completionMode": "Indexed", "completions": n, "parallelism": f.throttle(job), "backoffLimit": n, "template": _pod(f, command, job)},
    }


def report_job(f: Fanout) -> dict[str, Any]:
    """Renders the merged report from the shared volume; apply it once the Indexed Jobs have finished."""
    command = "exec " + quote(["envmatrix", "report", "--results", f"{f.reports}/results", "--out", f.reports])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f.name(), "labels": {"app.kubernetes.io/name": "envmatrix"}},
        "spec": {"backoffLimit": 1, "template": _pod(f, command, None)},
    }


def manifests(f: Fanout) -> dict[str, str]:
    """File name → YAML: `jobs.yaml` (the Indexed Jobs) and `report.yaml` (apply after they complete)."""
    jobs = yaml.safe_dump_all([indexed_job(f, job) for job in f.jobs], sort_keys=False, width=1000)
    names = " ".join(f"job/{f.name(job)}" for job in f.jobs)
    head = f"# kubectl apply -f jobs.yaml && kubectl wait --for=condition=complete --timeout=24h {names} && kubectl apply -f report.yaml\n"
    return {"jobs.yaml": head + jobs, "report.yaml": yaml.safe_dump(report_job(f), sort_keys=False, width=1000)}
