"""The Kubernetes runner images: each environment's probe image (the docker backend builds it, or reuses it) with
envmatrix and the matrix file added by dockerfiles/runner.Dockerfile, tagged as the manifests name it (k8s.py).

A build box needs Docker, not a GPU: building an image runs no cell, so the NVIDIA toolkit check is the cells'
business, not this one's. Pushing is the team's: the images go to the registry its cluster pulls from.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..backends import BuildFailed
from ..backends.docker import DockerBackend
from ..errors import BackendError
from ..plan.builds import Build
from ..plan.cells import Environment
from . import SubmitError

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "dockerfiles" / "runner.Dockerfile"
#: What `pip install` needs of envmatrix's source: its metadata, the package and the probe beside it; and the probe
#: image's Dockerfile and steps, which a pod of `submit k8s --backend docker` builds on its node's engine.
SOURCE = ("pyproject.toml", "README.md", "envmatrix", "probes", "dockerfiles")


class _ImagesOnly(DockerBackend):
    """The docker backend's image builds, on a machine that runs no cell (no GPU runtime asked for)."""

    def require_gpu_runtime(self) -> None:
        return None


def context(folder: Path, matrix_file: str) -> None:
    """The build context: the Dockerfile, envmatrix's source (no caches) and the matrix file."""
    missing = [name for name in (*SOURCE, "dockerfiles/runner.Dockerfile") if not (ROOT / name).exists()]
    if missing:
        raise BackendError(f"{ROOT}: no {', '.join(missing)}: runner images are built from a checkout of envmatrix (git clone)")
    shutil.copy(DOCKERFILE, folder / "Dockerfile")
    (folder / "src").mkdir()
    for name in SOURCE:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, folder / "src" / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(source, folder / "src" / name)
    shutil.copy(matrix_file, folder / "matrix.yaml")


def _stream(client: Any, folder: Path, ref: str, args: dict[str, str], log: Path) -> None:
    """Build `ref`, its log into `log`; a failure raises SubmitError with the step and the log's path."""
    step = "(before the first step)"
    with log.open("w") as out:
        for chunk in client.api.build(path=str(folder), tag=ref, buildargs=args, rm=True, forcerm=True, decode=True, pull=False):
            text = chunk.get("stream") or chunk.get("status") or ""
            if text:
                out.write(text if text.endswith("\n") else text + "\n")
                step = text.strip() if text.startswith("Step ") else step
            if "error" in chunk:
                out.write(f"ERROR: {chunk['error']}\n")
                raise SubmitError(f"runner image {ref}: docker build failed at {step}: {chunk['error'].strip()[:300]} (log: {log})")


def build(images: dict[str, Environment], *, profile: str, matrix_file: str, logs: Path, say: Callable[[str], None] = print, client: Any = None) -> list[str]:
    """Build each runner image (its probe image first, reused when present); return the references built."""
    backend = _ImagesOnly(client=client)
    logs.mkdir(parents=True, exist_ok=True)
    done = []
    for ref, env in images.items():
        stem = ref.rsplit(":", 1)[-1]
        try:
            probe = backend.prepare(Build(env.build_id, env, ()), logs / f"{stem}.probe.log")
        except BuildFailed as exc:
            raise SubmitError(f"the probe image of {env.build_id}: {exc} (log: {logs / f'{stem}.probe.log'})") from None
        with tempfile.TemporaryDirectory(prefix="envmatrix-runner-") as tmp:
            context(Path(tmp), matrix_file)
            _stream(backend.client, Path(tmp), ref, {"PROBE_IMAGE": str(probe.facts["image"]), "PROFILE": profile}, logs / f"{stem}.runner.log")
        say(f"built {ref} (from {probe.facts['image']})")
        done.append(ref)
    return done
