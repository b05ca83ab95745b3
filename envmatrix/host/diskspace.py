"""Free space on the Docker engine's data root before a build: a clear error instead of a build that fills the disk.

The data root (`docker info`'s DockerRootDir) is on the engine's host, which need not be this runner's file
system (a runner in a container with the host's socket): it is measured where the engine sees it, by `df` in a
container of the build's base image (already on the engine: builds never pull) with the data root mounted
read-only; where that cannot run, on this host's file system if the path exists here.

What an image needs: the layers the previous image of the same environment added over its base (measured),
else a documented estimate per kind of image, plus room left for the engine (`RESERVE_BYTES`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HostProblem
from .dockerfs import run_briefly

GIB = 1024**3
#: A CUDA probe image's own layers (above its CUDA base), an estimate used until an image of the environment exists
#: to measure: torch's cu12 wheel and its nvidia-* wheels (cuBLAS, cuDNN, NCCL, cuSPARSE, cuFFT, ...) are a few GB
#: compressed and more installed, then transformers, flash-attn, trl and peft. Issue 40's reading of the gpu profile
#: put its 24 images at about 100 GB, about 4 GB each; 8 GiB leaves room for the build's downloads beside the install.
CUDA_IMAGE_BYTES = 8 * GIB
#: A CPU probe image's own layers: a CPU torch and the rest (measured on this project's CI engine: the image of
#: torch 2.13.0+cpu and transformers 4.57.6 added 1.2 GiB over its Debian base; docs/hosts.md).
CPU_IMAGE_BYTES = 2 * GIB
#: Left free for the engine itself (its metadata, containers' writable layers, logs): a full data root stops
#: every container on the host, not only envmatrix's.
RESERVE_BYTES = 2 * GIB


class NoSpace(HostProblem):
    """The engine's data root lacks the room for the next image: nothing was built."""


@dataclass(frozen=True)
class Space:
    """The data root, its free bytes and where they were measured."""

    root: str
    free: int
    how: str


def _df_in_container(client: Any, image: str, root: str) -> int | None:
    """Free bytes of `root` as the engine's host sees it: POSIX `df -P -k` in a container of `image`."""
    from docker.errors import DockerException

    try:
        code, text = run_briefly(
            client,
            image,
            ["-P", "-k", "/envmatrix-data-root"],
            entrypoint=["df"],
            volumes={root: {"bind": "/envmatrix-data-root", "mode": "ro"}},
            user="65534:65534",
        )
    except DockerException:
        return None
    lines = text.strip().splitlines()
    fields = lines[-1].split() if code == 0 and len(lines) >= 2 else []
    return int(fields[3]) * 1024 if len(fields) >= 4 and fields[3].isdigit() else None


def measure(client: Any, image: str) -> Space | None:
    """The engine's data root and its free bytes, or None where neither way can measure it."""
    root = str((client.info() or {}).get("DockerRootDir") or "")
    if not root:
        return None
    free = _df_in_container(client, image, root)
    if free is not None:
        return Space(root, free, f"df in a container of {image}")
    if Path(root).exists():
        st = os.statvfs(root)
        return Space(root, st.f_bavail * st.f_frsize, "this host's file system")
    return None


def needed(estimate: int | None, cuda: bool) -> int:
    """What one image's build needs: its measured or estimated size, and the reserve."""
    return (estimate if estimate else CUDA_IMAGE_BYTES if cuda else CPU_IMAGE_BYTES) + RESERVE_BYTES


def gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def require(space: Space | None, need: int, what: str) -> str:
    """A line for the build log; NoSpace when the data root has less than `need` bytes free."""
    if space is None:
        return f"free space on the engine's data root not measured (no way to read it from here); {what} needs about {gib(need)}"
    if space.free < need:
        raise NoSpace(
            f"not enough free space on the Docker engine's data root {space.root}: {gib(space.free)} free ({space.how}), "
            f"{what} needs about {gib(need)} (its own layers and {gib(RESERVE_BYTES)} left for the engine): "
            "remove superseded probe images (envmatrix images --prune --yes), free space, or move the engine's data-root"
        )
    return f"free space on {space.root}: {gib(space.free)} ({space.how}); {what} needs about {gib(need)}"
