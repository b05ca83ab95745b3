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


def docker_pod(manifest: dict[str, Any], extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """A docker-backend Job's container as its pod would run: its image, user and supplemental groups, its hostPath
    volumes (the engine's socket, the node folder) at the paths the manifest mounts them, its env and command;
    `extra` docker run options stand for what a team adds to its pods (its package index)."""
    spec = manifest["spec"]["template"]["spec"]
    box = spec["containers"][0]
    sec = spec["securityContext"]
    argv = ["docker", "run", "--rm", "--user", f"{sec['runAsUser']}:{sec['runAsGroup']}", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    argv += [x for gid in sec.get("supplementalGroups", []) for x in ("--group-add", str(gid))]
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    argv += [x for m in box["volumeMounts"] if m["name"] in paths for x in ("-v", f"{paths[m['name']]}:{m['mountPath']}")]
    argv += [x for e in box.get("env", []) for x in ("-e", f"{e['name']}={e['value']}")]
    return subprocess.run([*argv, *extra, box["image"], *box["command"]], capture_output=True, text=True, timeout=2400, check=False)


@pytest.mark.skipif(
    not os.environ.get("ENVMATRIX_POD_TESTS"),
    reason="builds a runner image and a probe image on the engine (about 10 minutes on 2 cores): nox -s pods runs it",
)
def test_a_docker_backend_pod_runs_its_cells_on_the_nodes_engine(tmp_path: Path, client: Any) -> None:
    """submit k8s --backend docker, for real: the runner image built, its Job's container run against this machine's
    engine through the mounted socket (the pod's user in the socket's group) with the node folder mounted at its own
    path: the engine runs the cell in a probe container, the record lands in the node folder, the report Job renders."""
    sock = Path("/var/run/docker.sock")
    if not sock.is_socket():
        pytest.skip(f"no Docker engine socket at {sock}")
    gid = sock.stat().st_gid
    node = tmp_path / "node-folder"  # a folder of the "node" (this machine), as the engine sees it
    node.mkdir()
    os.chown(node, 1000, 1000)  # what the docs ask of a team: install -d -o 1000 -g 1000 FOLDER
    out = tmp_path / "k8s"
    only = f"{ENV}/fp32-sdpa"
    args = ["submit", "k8s", "--file", str(ROOT / "matrix.yaml"), "--profile", "cpu", "--only", only, "--backend", "docker"]
    args += ["--docker-gid", str(gid), "--reports", str(node), "--out", str(out), "--build"]
    built = subprocess.run([sys.executable, "-m", "envmatrix", *args], cwd=tmp_path, capture_output=True, text=True, timeout=3000, check=False)
    print(built.stdout[-3000:], built.stderr[-3000:])
    assert built.returncode == 0, built.stdout + built.stderr + "".join(p.read_text()[-3000:] for p in (out / "logs").glob("*.log"))
    (job,) = list(yaml.safe_load_all((out / "jobs.yaml").read_text()))
    # What a team adds to its pods where its nodes reach the index through a proxy: the pip settings and the CA bundle
    # of this machine (its local wheels hold the CPU torch; its proxy's CA signs pypi.org), which the runner puts into
    # the build context it sends to the engine (plan/install.py, backends/docker.py), as a node's pod would.
    links = os.environ.get("PIP_FIND_LINKS", "")
    index = tuple(x for k, v in os.environ.items() if k.startswith("PIP_") for x in ("-e", f"{k}={v}"))
    index += tuple(x for d in links.split() if Path(d).is_dir() for x in ("-v", f"{d}:{d}:ro"))
    ca = Path("/etc/ssl/certs/ca-certificates.crt")  # the runner's CA bundle goes into the builds (backends/docker.py HOST_CA)
    index += ("-v", f"{ca}:{ca}:ro") if ca.is_file() else ()
    ran = docker_pod(job, index)
    print(ran.stdout[-4000:], ran.stderr[-4000:])
    assert ran.returncode == 0, ran.stdout + ran.stderr
    records = [json.loads(p.read_text()) for p in (node / "results").glob("*.json")]
    assert [r["cell"]["id"] for r in records] == [only]
    assert records[0]["backend"] == "docker" and records[0]["outcome"]["class"] == "ok", records[0]["outcome"]
    report = yaml.safe_load((out / "report.yaml").read_text())
    done = docker_pod(report)
    assert done.returncode == 0, done.stdout + done.stderr
    assert only in (node / "matrix.html").read_text()
