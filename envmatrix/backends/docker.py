"""One probe image per environment, built and run with the Docker SDK.

Images are tagged by a hash of everything they are built from and reused while it is unchanged. Each
scenario runs in its own container: no network, an unprivileged user with no capabilities, a read-only
root file system, GPUs by device request, the output folder mounted, a timeout that kills it, and
removal afterwards, on Ctrl-C too.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import certifi

from probes import source_files as probe_files

from .. import catalog, flashsource
from ..cells import Environment
from ..errors import BackendError
from ..execute import Completed, probe_command, process_alive
from ..pipconfig import PipSettings, local_torch_wheel, read_pip_settings, torch_index_url
from ..plan import Build
from ..spec import Scenario
from . import BuildFailed, Prepared
from .venv import package_requirements

ROOT = Path(__file__).resolve().parent.parent.parent
DOCKERFILE = ROOT / "dockerfiles" / "probe.Dockerfile"
PROBE_IN_IMAGE = Path("/opt/envmatrix/probes/grpo_smoke.py")
CPU_BASE = "envmatrix-base:bookworm"
CUDA_BASES = {
    "11.8": "nvidia/cuda:11.8.0-cudnn8-devel-ubuntu22.04",
    "12.1": "nvidia/cuda:12.1.1-cudnn8-devel-ubuntu22.04",
    "12.4": "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04",
    "12.6": "nvidia/cuda:12.6.3-cudnn-devel-ubuntu22.04",
    "12.8": "nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04",
    "12.9": "nvidia/cuda:12.9.1-cudnn-devel-ubuntu22.04",
    "13.0": "nvidia/cuda:13.0.1-cudnn-devel-ubuntu22.04",
}
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def connect() -> Any:
    """A Docker client, or a BackendError that says what to do."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except DockerException as exc:
        text = str(exc)
        if "Permission denied" in text or "PermissionError" in text:
            raise BackendError(
                "permission denied on the Docker socket: add your user to the docker group (sudo usermod -aG docker $USER, then log in again) "
                "or run with access to /var/run/docker.sock"
            ) from None
        raise BackendError(f"no Docker engine reachable ({text.splitlines()[0][:200]}): start dockerd, or set DOCKER_HOST; or use --backend venv") from None
    return client


#: The unprivileged uid a cell runs as when the runner itself is root.
CELL_UID = 1000


def _cell_user(out: Path) -> str:
    """The container's user, and its output folder made private to it: the invoking user's uid/gid,
    or uid 1000 when the runner is root (never root in the container); the folder is mode 0700."""
    out.mkdir(parents=True, exist_ok=True)
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        uid = gid = CELL_UID
        os.chown(out, uid, gid)
    out.chmod(0o700)
    return f"{uid}:{gid}"


def _http_only(urls: tuple[str, ...]) -> list[str]:
    return [u for u in urls if u.startswith(("http://", "https://"))]


class DockerBackend:
    """Builds `envmatrix-probe:<hash>` images from dockerfiles/probe.Dockerfile and runs cells in containers."""

    name = "docker"

    def __init__(
        self,
        *,
        base_images: dict[str, str] | None = None,
        wheelhouse: Path | None = None,
        build_from_source: bool = False,
        flash_sources: tuple[str, ...] | None = None,
        settings: PipSettings | None = None,
        client: Any = None,
    ) -> None:
        if not DOCKERFILE.is_file():
            raise BackendError(f"{DOCKERFILE}: the probe's Dockerfile is missing; the docker backend runs from a checkout of envmatrix (git clone)")
        self.client = client or connect()
        self.base_images = {**CUDA_BASES, "none": CPU_BASE, **(base_images or {})}
        self.wheelhouse = wheelhouse
        self.build_from_source = build_from_source
        self.flash_sources = flash_sources or tuple(flashsource.default_sources(str(wheelhouse) if wheelhouse else None, build_from_source))
        self.settings = settings or read_pip_settings()
        self.running: set[Any] = set()
        self.lock = threading.Lock()

    def __enter__(self) -> DockerBackend:
        self.remove_stale()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop_all()

    def remove_stale(self) -> list[str]:
        """Remove cell containers whose runner on this host is gone (it was killed with SIGKILL)."""
        removed = []
        for container in self.client.containers.list(all=True, filters={"label": ["envmatrix=cell", f"envmatrix.host={platform.node()}"]}):
            pid = container.labels.get("envmatrix.runner", "")
            if pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid)):
                continue
            container.remove(force=True)
            removed.append(str(container.name))
        return removed

    # ---- images ----------------------------------------------------------------------------------

    def require_gpu_runtime(self) -> None:
        """GPU cells need the NVIDIA container toolkit registered with the engine."""
        runtimes = (self.client.info() or {}).get("Runtimes") or {}
        if "nvidia" not in runtimes:
            raise BackendError(
                "no NVIDIA runtime in the Docker engine (runtimes: " + ", ".join(runtimes) + "): install the NVIDIA container toolkit "
                "(nvidia-ctk runtime configure --runtime=docker; restart dockerd), or run GPU cells with --backend venv"
            )

    def build_args(self, env: Environment, wheels: Path) -> dict[str, str]:
        """The Dockerfile's ARGs for an environment; every value is a validated version or name."""
        args = {
            "BASE_IMAGE": self.base_images.get(env.cuda, ""),
            "PYTHON": env.python,
            "TRANSFORMERS": env.transformers,
            "PACKAGES": " ".join(package_requirements(env)),
            "FLASH_ATTN": env.flash_attn,
            "FLASH_ATTN_SOURCES": " ".join(self.flash_sources),
            "PIP_EXTRA_INDEX_URL": " ".join(_http_only(self.settings.extra_index_urls)),
        }
        if not args["BASE_IMAGE"]:
            raise BuildFailed(f"no base image for CUDA {env.cuda}: add it to the profile's base_images")
        if self.settings.index_url and self.settings.index_url.startswith(("http://", "https://")):
            args["PIP_INDEX_URL"] = self.settings.index_url
        if env.cuda == "none":
            args["TORCH_REQUIREMENT"] = f"torch=={env.torch}+cpu"
            args["TORCH_INDEX_URL"] = "" if any(wheels.glob(f"torch-{env.torch}+cpu-*.whl")) else torch_index_url(env.cuda_tag)
        else:
            args["TORCH_REQUIREMENT"] = f"torch=={env.torch}"
            args["TORCH_INDEX_URL"] = torch_index_url(env.cuda_tag)
        if env.flash_attn != "none":
            for flag in (True, False):
                key = "FLASH_WHEEL_ABI_TRUE" if flag else "FLASH_WHEEL_ABI_FALSE"
                args[key] = catalog.flash_wheel_name(env.flash_attn, env.torch, env.cuda, env.python, abi_flag=flag)
        return args

    def _context(self, env: Environment, folder: Path) -> None:
        """The build context: Dockerfile, probe, CA bundle, and a wheelhouse (the CPU torch, the user's wheels)."""
        shutil.copy(DOCKERFILE, folder / "Dockerfile")
        (folder / "probes").mkdir()
        for source in probe_files():
            shutil.copy(source, folder / "probes" / source.name)
        (folder / "certs").mkdir()
        ca = HOST_CA if HOST_CA.exists() else Path(certifi.where())
        shutil.copy(ca, folder / "certs" / "ca.crt")
        wheels = folder / "wheelhouse"
        wheels.mkdir()
        sources = [Path(p) for p in ([str(self.wheelhouse)] if self.wheelhouse else [])]
        if env.cuda == "none":
            found = local_torch_wheel(env.torch, self.settings.find_links)
            if found:
                sources += [Path(w) for w in Path(found).glob(f"torch-{env.torch}+cpu-*.whl")]
        for src in sources:
            for wheel in [src] if src.is_file() else sorted(src.glob("*.whl")):
                target = wheels / wheel.name
                try:
                    os.link(wheel, target)
                except OSError:
                    shutil.copy(wheel, target)

    def image_tag(self, args: dict[str, str], folder: Path) -> str:
        """`envmatrix-probe:<16 hex>` over the Dockerfile, the probe, the build args and the wheelhouse listing."""
        h = hashlib.sha256()
        for path in (folder / "Dockerfile", *sorted((folder / "probes").iterdir()), folder / "certs" / "ca.crt"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        h.update(json.dumps(args, sort_keys=True).encode())
        for wheel in sorted((folder / "wheelhouse").iterdir()):
            h.update(f"{wheel.name}:{wheel.stat().st_size}".encode())
        return f"envmatrix-probe:{h.hexdigest()[:16]}"

    def prepare(self, build: Build, log: Path) -> Prepared:
        from docker.errors import ImageNotFound

        env = build.env
        if env.cuda != "none":
            self.require_gpu_runtime()
        log.parent.mkdir(parents=True, exist_ok=True)
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="envmatrix-build-") as tmp:
            folder = Path(tmp)
            self._context(env, folder)
            args = self.build_args(env, folder / "wheelhouse")
            tag = self.image_tag(args, folder)
            try:
                image = self.client.images.get(tag)
                reused = True
                log.write_text(f"reusing image {tag} ({image.id})\n")
            except ImageNotFound:
                reused = False
                image = self._build(folder, tag, args, log)
        facts: dict[str, object] = {
            "tool": "docker",
            "image": tag,
            "image_id": image.id,
            "base_image": args["BASE_IMAGE"],
            "base_image_id": self._image_id(args["BASE_IMAGE"]),
            "build_args": args,
            "seconds": round(time.monotonic() - start, 2),
            "freeze": self._freeze(tag),
            "index_url": args.get("PIP_INDEX_URL"),
            "extra_index_urls": [u for u in [*_http_only(self.settings.extra_index_urls), args["TORCH_INDEX_URL"]] if u],
            "find_links": [],
        }
        return Prepared(python="python", seconds=float(str(facts["seconds"])), reused=reused, facts=facts)

    def _image_id(self, ref: str) -> str | None:
        from docker.errors import ImageNotFound

        try:
            return str(self.client.images.get(ref).id)
        except ImageNotFound:
            return None

    def _build(self, folder: Path, tag: str, args: dict[str, str], log: Path) -> Any:
        """Stream the build log into `log`; a failure names the step that failed."""
        from docker.errors import APIError

        step = "(before the first step)"
        with log.open("w") as out:
            out.write(f"building {tag} with {json.dumps(args)}\n")
            try:
                for chunk in self.client.api.build(path=str(folder), tag=tag, buildargs=args, rm=True, forcerm=True, decode=True, pull=False):
                    text = chunk.get("stream") or chunk.get("status") or ""
                    if text:
                        out.write(text if text.endswith("\n") else text + "\n")
                        if text.startswith("Step "):
                            step = text.strip()
                    if "error" in chunk:
                        out.write(f"ERROR: {chunk['error']}\n")
                        raise BuildFailed(f"docker build failed at {step}: {chunk['error'].strip()[:500]}")
            except APIError as exc:
                raise BuildFailed(f"docker build failed at {step}: {exc.explanation or exc}") from None
        return self.client.images.get(tag)

    def _freeze(self, tag: str) -> list[str]:
        out = self.client.containers.run(tag, ["python", "-m", "pip", "freeze"], remove=True, network_disabled=True, user="1000")
        return [line for line in out.decode().splitlines() if line.strip()]

    # ---- cells -----------------------------------------------------------------------------------

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        """One scenario in its own container; killed at the timeout; always removed."""
        import docker
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import ReadTimeout

        user = _cell_user(out)
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = probe_command("python", scenario, Path("/out"), probe=PROBE_IN_IMAGE)
        options: dict[str, Any] = {
            "detach": True,
            "user": user,
            "network_mode": "none",  # no network; loopback (and /etc/hosts) stay for torchrun and gloo
            "hostname": "localhost",  # torchrun's rendezvous advertises the hostname: make it resolve to loopback
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            "tmpfs": {"/tmp": "", "/home/probe": ""},
            "init": True,  # a real init as PID 1: signals kill the probe as they would outside
            "shm_size": "2g",
            "volumes": {str(out.resolve()): {"bind": "/out", "mode": "rw"}},
            "environment": {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", "HOME": "/home/probe"},
            "labels": {"envmatrix": "cell", "envmatrix.host": platform.node(), "envmatrix.runner": str(os.getpid())},
        }
        if gpu_ids:
            options["device_requests"] = [docker.types.DeviceRequest(device_ids=[str(i) for i in gpu_ids], capabilities=[["gpu"]])]
            options["ulimits"] = [docker.types.Ulimit(name="memlock", soft=-1, hard=-1)]
        start = time.monotonic()
        container = self.client.containers.run(str(ready.facts["image"]), cmd, **options)
        with self.lock:
            self.running.add(container)
        timed_out = False
        try:
            try:
                code = int(container.wait(timeout=timeout)["StatusCode"])
            except (ReadTimeout, RequestsConnectionError):
                timed_out = True
                container.kill()
                code = int(container.wait(timeout=60)["StatusCode"])
            with log.open("wb") as fh:
                fh.write(("$ docker run " + str(ready.facts["image"]) + " " + " ".join(cmd) + "\n").encode())
                for chunk in container.logs(stdout=True, stderr=True, stream=True):
                    fh.write(chunk)
                if timed_out:
                    fh.write(f"\n[envmatrix] killed after the {timeout:g} s timeout\n".encode())
        finally:
            with self.lock:
                self.running.discard(container)
            container.remove(force=True)
        return Completed(code, timed_out, round(time.monotonic() - start, 3))

    def stop_all(self) -> None:
        with self.lock:
            containers = list(self.running)
        for container in containers:
            try:
                container.remove(force=True)
            except Exception:  # already gone: nothing left to stop
                continue
