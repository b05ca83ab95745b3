"""Does the Docker engine see this runner's folders? Found in seconds, before the first cell.

The docker backend bind-mounts folders of the runner into containers: each cell's output folder, and the fork
helper's socket folder (under the temporary folder, TMPDIR). A runner that is itself in a container, talking to
the host's engine through a mounted docker.sock, names paths of its own file system; the engine mounts the host's
paths of the same names, which are other (empty) folders. Cells then write where the runner never looks, and the
fork helper's socket never appears: each environment waited the helper's whole start timeout (900 s) before it
fell back. Here a marker file written in the folder is read back from a container that mounts it.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import HostProblem

MARKER = ".envmatrix-engine-sees-this"


class NotShared(HostProblem):
    """The engine does not see a folder the runner mounts into containers: nothing it runs could be read back."""


def run_briefly(client: Any, image: str, argv: list[str], *, stderr: bool = True, **options: Any) -> tuple[int, str]:
    """A short locked-down container of `image` (no network, no capabilities, read-only root): its exit status and
    output. The output is read until it comes: an engine under load can answer `wait` before its log copier has
    written a fast container's output (docker-py's `containers.run` then returns b'' for a container that printed)."""
    container = client.containers.create(image, argv, network_disabled=True, read_only=True, cap_drop=["ALL"], **options)
    try:
        container.start()
        code = int(container.wait(timeout=120)["StatusCode"])
        text = ""
        for _ in range(20):
            text = container.logs(stdout=True, stderr=stderr).decode(errors="replace")
            if text:
                break
            time.sleep(0.1)
        return code, text
    finally:
        container.remove(force=True)


def sees(client: Any, image: str, folder: Path) -> bool | None:
    """Whether a container of `image` that mounts `folder` reads the marker written there now (told by its exit
    status, which no log race can lose); None when no container could be started (the image is missing: the build
    says so)."""
    from docker.errors import DockerException

    token = secrets.token_hex(16)
    marker = folder / MARKER
    marker.write_text(token)
    marker.chmod(0o644)
    try:
        code, _ = run_briefly(
            client,
            image,
            ["-c", f'test "$(cat /envmatrix-check/{MARKER})" = {token}'],
            entrypoint=["sh"],  # not the image's: CUDA images' entrypoint prints a banner first
            volumes={str(folder.resolve()): {"bind": "/envmatrix-check", "mode": "ro"}},
            user=f"{os.getuid()}:{os.getgid()}",
        )
    except DockerException:
        return None
    finally:
        marker.unlink(missing_ok=True)
    return code == 0


class SharedFolders:
    """Each folder checked once per backend; NotShared names the folder and what to do."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.checked: set[Path] = set()
        self.lock = threading.Lock()

    def require(self, image: str, *folders: Path) -> None:
        for folder in folders:
            folder = folder.resolve()
            with self.lock:
                if folder in self.checked:
                    continue
            folder.mkdir(parents=True, exist_ok=True)
            seen = sees(self.client, image, folder)
            if seen is False:
                raise NotShared(
                    f"the Docker engine does not see {folder} as this runner does: a file written there was not found in a "
                    "container that mounts it (is envmatrix running in a container with the host's docker.sock?). Mount that "
                    "folder into the runner's container at the same path on the host (e.g. -v /srv/envmatrix:/srv/envmatrix), "
                    "and point TMPDIR and --reports into it; or run envmatrix on the host"
                )
            if seen is True:
                with self.lock:
                    self.checked.add(folder)

    def require_runner_folders(self, image: str, reports_folder: Path) -> None:
        """The folders a run mounts: its reports folder (cells' output) and one under TMPDIR (helper sockets),
        checked in a fresh folder there as the helper's are."""
        self.require(image, reports_folder)
        tmp = Path(tempfile.gettempdir()).resolve()
        with self.lock:
            if tmp in self.checked:
                return
        scratch = Path(tempfile.mkdtemp(prefix="envmatrix-fscheck-"))
        try:
            self.require(image, scratch)
        finally:
            scratch.rmdir()
        with self.lock:
            self.checked.discard(scratch.resolve())
            self.checked.add(tmp)


def gpu_container_problem(client: Any, image: str, device_ids: list[str]) -> str | None:
    """What the engine says when a container of `image` is given these GPUs (`docker run --gpus`), or None when it
    started and has the NVIDIA control device: a toolkit that is installed but cannot serve (no driver libraries in
    reach, a hook that fails, a CDI spec of other GPUs) shows only here."""
    import docker
    from docker.errors import DockerException

    try:
        code, _ = run_briefly(
            client,
            image,
            ["-c", "test -e /dev/nvidiactl"],
            entrypoint=["sh"],
            device_requests=[docker.types.DeviceRequest(device_ids=device_ids, capabilities=[["gpu"]])],
            user="65534:65534",
        )
    except DockerException as exc:
        said = str(getattr(exc, "explanation", None) or exc).strip()
        return said.splitlines()[0][:300] if said else type(exc).__name__
    return None if code == 0 else "the container started but has no /dev/nvidiactl: the toolkit passed no NVIDIA device in"
