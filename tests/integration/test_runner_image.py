"""The Kubernetes runner image for real: `submit k8s --build` builds an environment's probe image and its runner
image on this machine's engine, then the Job's own command runs in it as its pod would (uid 1000, the volume at
/envmatrix, no network needed but the probe's): the cell is recorded by the host backend, the report Job renders.

No cluster here: the pod is played by `docker run` with what the manifest says (image, user, command, mounts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENV = "cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11"

pytestmark = pytest.mark.integration


@pytest.fixture
def client(docker_client: Any) -> Any:
    """The engine (the root conftest's `docker_client`), under the name these tests use."""
    return docker_client


def pod(manifest: dict[str, Any], volume: Path) -> subprocess.CompletedProcess[str]:
    """Run a Job's container as Kubernetes would: its image, user, command; the claim and /dev/shm mounted."""
    spec = manifest["spec"]["template"]["spec"]
    box = spec["containers"][0]
    user = f"{spec['securityContext']['runAsUser']}:{spec['securityContext']['fsGroup']}"
    mount = next(m["mountPath"] for m in box["volumeMounts"] if m["name"] == "reports")
    argv = ["docker", "run", "--rm", "--user", user, "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--shm-size", "1g"]
    argv += ["-v", f"{volume}:{mount}", box["image"], *box["command"]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=1200, check=False)


def test_a_runner_image_runs_its_environments_cells_as_its_pod_would(tmp_path: Path, client: Any) -> None:
    out = tmp_path / "k8s"
    only = f"{ENV}/fp32-sdpa"
    args = ["submit", "k8s", "--file", str(ROOT / "matrix.yaml"), "--profile", "cpu", "--only", only, "--out", str(out), "--build"]
    built = subprocess.run([sys.executable, "-m", "envmatrix", *args], cwd=tmp_path, capture_output=True, text=True, timeout=3000, check=False)
    print(built.stdout[-3000:], built.stderr[-3000:])
    assert built.returncode == 0, built.stdout + built.stderr + "".join(p.read_text()[-3000:] for p in (out / "logs").glob("*.log"))
    (job,) = list(yaml.safe_load_all((out / "jobs.yaml").read_text()))
    image = job["spec"]["template"]["spec"]["containers"][0]["image"]
    assert f"docker push {image}" in built.stdout
    volume = tmp_path / "volume"
    volume.mkdir()
    os.chown(volume, 1000, 1000)  # what fsGroup does for the pod on a fresh claim
    ran = pod(job, volume)
    print(ran.stdout[-2000:], ran.stderr[-2000:])
    assert ran.returncode == 0, ran.stdout + ran.stderr
    records = [json.loads(p.read_text()) for p in (volume / "reports" / "results").glob("*.json")]
    assert [r["cell"]["id"] for r in records] == [only]
    assert records[0]["backend"] == "host" and records[0]["outcome"]["class"] == "ok", records[0]["outcome"]
    assert records[0]["environment"]["facts"]["transformers"] == "4.57.6"
    report = yaml.safe_load((out / "report.yaml").read_text())
    done = pod(report, volume)
    assert done.returncode == 0, done.stdout + done.stderr
    assert only in (volume / "reports" / "matrix.html").read_text()
