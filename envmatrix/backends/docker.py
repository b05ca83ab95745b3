"""One probe image per environment, built and run with the Docker SDK.

Images are tagged by a hash of everything they are built from and reused while it is unchanged. Each
scenario runs in its own container: no network, an unprivileged user with no capabilities, a read-only
root file system, GPUs by device request, the output folder mounted, a timeout that kills it, and
removal afterwards, on Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import re
import shutil
import signal
import tarfile
import tempfile
import threading
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import certifi

from probes import caches
from probes import source_files as probe_files

from ..errors import BackendError
from ..facts import catalog, elfarch, flashsource
from ..host import diskspace, dockerfs, gpunames
from ..host.gpus import HostGpus, detect_gpus, visible_devices
from ..host.pipconfig import read_pip_settings
from ..plan.builds import Build
from ..plan.cells import Environment
from ..plan.eligibility import driver_too_old
from ..plan.install import FLASH_SOURCE_BUILD_ENV, SOURCE_BUILD_REQUIREMENTS, InstallSet, Sources, install_set, package_pins
from ..run.execute import Completed, fork_refusal, probe_argv, probe_command, process_alive
from ..run.forkclient import CMDLINE_ROOM, HARD_S, LOG_NOTE, Helper, HelperFailed, HelperPool, connect_when_ready, forked_launch, helper_from_hello, run_forked
from ..spec.matrix import Scenario
from . import BuildFailed, Prepared, images

ROOT = Path(__file__).resolve().parent.parent.parent
DOCKERFILE = ROOT / "dockerfiles" / "probe.Dockerfile"
STEPS = ROOT / "dockerfiles" / "steps"  # the image's Python, user and compiler steps (shell, any base)
PROBE_IN_IMAGE = Path("/opt/envmatrix/probes/grpo_smoke.py")
FORKSERVER_IN_IMAGE = PROBE_IN_IMAGE.with_name("forkserver.py")
HELPER_DIR = "/envmatrix-helper"  # the helper's socket folder, mounted from the host
RUNS_DIR = "/runs"  # the cells' output folders (the parent of every `out`), mounted for the helper
CELL_LOG = ".envmatrix-cell.log"  # a forked cell's output inside its folder, moved into its log afterwards
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
PYTHON_RECORD = "/opt/envmatrix-python.txt"  # how dockerfiles/steps/python.sh provided the Python: image, distribution or uv
HOME_IN_CONTAINER = "/home/probe"  # a tmpfs (exec) in every probe container: its HOME and cache root
CACHES_IN_CONTAINER = f"{HOME_IN_CONTAINER}/.envmatrix-caches"
THREAD_VARS = ("OMP_NUM_THREADS",)  # what a cell takes from the runner's environment for it (its share of the cores)
IMAGES = images.REPOSITORY  # the repository of the probe images: envmatrix-probe:<hash>


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


def _file_from(container: Any, path: str) -> bytes:
    """One regular file's bytes out of a (created, not started) container, through the engine's archive API."""
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        handle = tar.extractfile(member) if member is not None else None
        if handle is None:
            raise BuildFailed(f"{path}: not a regular file in the image")
        return handle.read()


def build_jobs() -> int:
    """MAX_JOBS for a build from source: the host's cores, at most one per 4 GiB of memory (flash-attn's
    nvcc jobs take several GB each; its README asks for fewer jobs on hosts with less memory than cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30
    except (ValueError, OSError):
        return max(1, min(cores, 4))
    return max(1, min(cores, gib // 4))


def source_build_args(wanted: InstallSet) -> dict[str, str]:
    """The Dockerfile's build-from-source ARGs, only where the environment builds something from source (they
    take part in the image's tag: an image with no source build does not change with the host's cores)."""
    if not wanted.toolkit:
        return {}
    args = {"SOURCE_BUILD": " ".join(SOURCE_BUILD_REQUIREMENTS)}
    if wanted.flash_attn is not None and flashsource.SDIST in wanted.flash_attn.sources:
        args["FLASH_BUILD_ENV"] = " ".join(f"{k}={v}" for k, v in FLASH_SOURCE_BUILD_ENV)
        args["MAX_JOBS"] = str(build_jobs())
    return args


def source_build_refusal(env: Environment, wanted: InstallSet) -> str | None:
    """Why this environment's build from source cannot work whatever the base (said before building), or None."""
    if env.cuda == "none" and ("DS_BUILD_OPS", "1") in wanted.build_env:
        return "DS_BUILD_OPS=1 compiles DeepSpeed's CUDA ops, which a CPU environment cannot: set build_from_source: false (ops compiled at first use)"
    return None


def plain_http_hosts(urls: list[str]) -> list[str]:
    """The host[:port] of each plain-http index: pip ignores an http index unless told to trust its host (a team's
    internal mirror, the rehearsal's local torch index); https ones are verified as ever."""
    hosts = []
    for url in urls:
        for word in url.split():
            parts = urllib.parse.urlsplit(word)
            if parts.scheme == "http" and parts.hostname and re.fullmatch(r"[A-Za-z0-9.-]+(:[0-9]+)?", parts.netloc) and parts.netloc not in hosts:
                hosts.append(parts.netloc)
    return hosts


def _http_only(urls: tuple[str, ...]) -> list[str]:
    return [u for u in urls if u.startswith(("http://", "https://"))]


class DockerBackend:
    """Builds `envmatrix-probe:<hash>` images from dockerfiles/probe.Dockerfile and runs cells in containers:
    single-process cells forked by a helper in one long-lived container per environment, DDP cells (and
    every cell with `fork` off) in a container of their own."""

    name = "docker"
    fork = True

    def __init__(self, *, sources: Sources | None = None, client: Any = None, gpus: HostGpus | None = None) -> None:
        if not DOCKERFILE.is_file():
            raise BackendError(f"{DOCKERFILE}: the probe's Dockerfile is missing; the docker backend runs from a checkout of envmatrix (git clone)")
        self.client = client or connect()
        self.sources = sources or Sources(read_pip_settings())
        self.settings = self.sources.pip
        self.running: set[Any] = set()
        self.shared = dockerfs.SharedFolders(self.client)  # the engine sees the runner's folders (host/dockerfs.py)
        self._gpu_container_ok = False  # a container with a GPU started once (try_gpu_container)
        self.envs_of: dict[str, Environment] = {}  # image tag → its environment (labels, host/gpunames.py)
        self.reserved = 0  # bytes the builds in flight will take on the engine's data root (host/diskspace.py)
        self.lock = threading.Lock()
        self.helpers = HelperPool()
        self._gpus = gpus
        self.memlock_refused: str | None = None  # why the engine cannot lift the locked-memory limit, once it said so

    @property
    def gpus(self) -> HostGpus:
        """This runner's GPUs (nvidia-smi, read once, as CUDA_VISIBLE_DEVICES narrows them): their UUIDs name them to Docker."""
        if self._gpus is None:
            self._gpus = detect_gpus()
        return self._gpus

    def __enter__(self) -> DockerBackend:
        self.remove_stale()
        self.helpers.reopen()
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
        """GPU cells need the NVIDIA container toolkit: a runtime registered with the engine, or (what `docker run --gpus`
        uses without one) its prestart hook on the engine's PATH, or a CDI specification of the GPUs."""
        runtimes = (self.client.info() or {}).get("Runtimes") or {}
        hook = shutil.which("nvidia-container-runtime-hook")
        cdi = [p for p in ("/etc/cdi/nvidia.yaml", "/etc/cdi/nvidia.json", "/var/run/cdi/nvidia.yaml", "/var/run/cdi/nvidia.json") if Path(p).is_file()]
        if "nvidia" not in runtimes and hook is None and not cdi:
            raise BackendError(
                "no NVIDIA container toolkit for the Docker engine (runtimes: " + ", ".join(runtimes) + "; no nvidia-container-runtime-hook "
                "on PATH; no CDI specification in /etc/cdi or /var/run/cdi): install the NVIDIA container toolkit "
                "(nvidia-ctk runtime configure --runtime=docker; restart dockerd), or run GPU cells with --backend venv"
            )

    def try_gpu_container(self, image: str) -> None:
        """Start a container of `image` with one of this runner's GPUs, once per backend: a toolkit registered with the
        engine can still fail every `--gpus` container (host/dockerfs.py); BackendError with the engine's words."""
        if self._gpu_container_ok or not self.gpus.devices:
            return
        problem = dockerfs.gpu_container_problem(self.client, image, self.gpus.device_ids([self.gpus.devices[0].index]))
        if problem is not None:
            raise BackendError(
                f"could not start a container with a GPU ({problem}): check `docker run --rm --gpus all {image} nvidia-smi`; "
                "install or repair the NVIDIA container toolkit (nvidia-ctk runtime configure --runtime=docker; restart dockerd), "
                "or run GPU cells with --backend venv"
            )
        self._gpu_container_ok = True

    def build_args(self, env: Environment) -> dict[str, str]:
        """The Dockerfile's ARGs for an environment, from its install set; every value is a validated version or name."""
        wanted = install_set(env, self.sources)
        if wanted.base_image is None:
            raise BuildFailed(
                f"no base image for CUDA {env.cuda}: the catalog knows {', '.join(catalog.CUDA_IMAGE_VERSIONS)}; add one to the profile's base_images"
            )
        args = {
            "BASE_IMAGE": wanted.base_image,
            "PYTHON": env.python,
            "TRANSFORMERS": env.transformers,
            "PACKAGES": " ".join(package_pins(env)),
            "FLASH_ATTN": env.flash_attn,
            "FLASH_ATTN_SOURCES": " ".join(self.sources.flash_attn),
            "PIP_EXTRA_INDEX_URL": " ".join(_http_only(self.settings.extra_index_urls)),
            "TORCH_REQUIREMENT": wanted.torch,
            # a CPU torch found through find-links is copied into the context's wheelhouse (/wheelhouse in the image)
            "TORCH_INDEX_URL": wanted.torch_index or "",
            # sdist-only packages' build settings (plan/install.py SOURCE_BUILD_ENV): NAME=value words
            "BUILD_ENV": " ".join(f"{k}={v}" for k, v in wanted.build_env),
            # dependencies left out (plan/install.py EXCLUDED_DEPENDENCIES): distribution names
            "EXCLUDES": " ".join(wanted.excludes),
            # a compiler and Python's headers where something compiles at run time (plan/install.py RUNTIME_COMPILERS)
            "COMPILER": "1" if wanted.compiler else "0",
        }
        if self.settings.index_url and self.settings.index_url.startswith(("http://", "https://")):
            args["PIP_INDEX_URL"] = self.settings.index_url
        mirror = os.environ.get("UV_PYTHON_INSTALL_MIRROR", "")
        if mirror.startswith(("http://", "https://")):  # uv's CPython for a base whose distribution lacks the Python
            args["UV_PYTHON_INSTALL_MIRROR"] = mirror
        args |= source_build_args(wanted)
        trusted = plain_http_hosts([args.get("PIP_INDEX_URL", ""), args["PIP_EXTRA_INDEX_URL"], args["TORCH_INDEX_URL"]])
        if trusted:
            args["PIP_TRUSTED_HOST"] = " ".join(trusted)
        if wanted.flash_attn is not None:
            args["FLASH_WHEEL_ABI_TRUE"] = wanted.flash_attn.wheel_abi_true
            args["FLASH_WHEEL_ABI_FALSE"] = wanted.flash_attn.wheel_abi_false
        return args

    def check_source_build(self, env: Environment, args: dict[str, str]) -> None:
        """Refuse, before building, a build from source that cannot work: DS_BUILD_OPS=1 without CUDA, or a
        base without nvcc (the profile's base_images naming a runtime image) where something compiles CUDA."""
        from docker.errors import ContainerError, DockerException, ImageNotFound

        wanted = install_set(env, self.sources)
        why = source_build_refusal(env, wanted)
        if why is None and wanted.toolkit:
            base = args["BASE_IMAGE"]
            try:
                try:
                    self.client.images.get(base)
                except ImageNotFound:
                    self.client.images.pull(base)
                probe = ["sh", "-c", "command -v nvcc || test -x /usr/local/cuda/bin/nvcc"]
                self.client.containers.run(base, probe, remove=True, network_disabled=True, entrypoint=[])
            except ContainerError:
                why = f"the base image {base} has no nvcc, which {'; '.join(wanted.toolkit)} needs: use a CUDA devel base (cudnn-devel)"
            except DockerException:
                pass  # the engine could not check (no registry to pull the base from): the build's own step says it
        if why:
            raise BuildFailed(f"refused before building {env.build_id}: {why}")

    def _context(self, env: Environment, folder: Path) -> None:
        """The build context: Dockerfile, probe, CA bundle, and a wheelhouse (the CPU torch, the user's wheels)."""
        shutil.copy(DOCKERFILE, folder / "Dockerfile")
        shutil.copytree(STEPS, folder / "steps")
        (folder / "probes").mkdir()
        for source in probe_files():
            shutil.copy(source, folder / "probes" / source.name)
        (folder / "certs").mkdir()
        ca = HOST_CA if HOST_CA.exists() else Path(certifi.where())
        shutil.copy(ca, folder / "certs" / "ca.crt")
        wheels = folder / "wheelhouse"
        wheels.mkdir()
        sources = [self.sources.wheelhouse] if self.sources.wheelhouse else []
        found = install_set(env, self.sources).torch_find_links
        if found:
            sources += list(Path(found).glob(f"torch-{env.torch}+cpu-*.whl"))
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
        for path in (folder / "Dockerfile", *sorted((folder / "steps").iterdir()), *sorted((folder / "probes").iterdir()), folder / "certs" / "ca.crt"):
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        h.update(json.dumps(args, sort_keys=True).encode())
        for wheel in sorted((folder / "wheelhouse").iterdir()):
            h.update(f"{wheel.name}:{wheel.stat().st_size}".encode())
        return f"{IMAGES}:{h.hexdigest()[:16]}"

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
            args = self.build_args(env)
            tag = self.image_tag(args, folder)
            self.envs_of[tag] = env
            self.shared.require_runner_folders(args["BASE_IMAGE"], log.parent)
            if env.cuda != "none":
                self.try_gpu_container(args["BASE_IMAGE"])
            try:
                image = self.client.images.get(tag)
                reused = True
                log.write_text(f"reusing image {tag} ({image.id})\n")
            except ImageNotFound:
                reused = False
                self.check_source_build(env, args)
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
        facts["python_from"] = self._python_from(tag)
        if env.flash_attn != "none":  # what the venv backend records: the file, its sha256 and origin, its GPU archs
            facts["flash_attn"] = self._flash_facts(tag)
        return Prepared(python="python", seconds=float(str(facts["seconds"])), reused=reused, facts=facts)

    def _image_id(self, ref: str) -> str | None:
        from docker.errors import ImageNotFound

        try:
            return str(self.client.images.get(ref).id)
        except ImageNotFound:
            return None

    def _build(self, folder: Path, tag: str, args: dict[str, str], log: Path) -> Any:
        """Check the engine's free space for it (host/diskspace.py), then build. The image carries its environment and
        recipe as labels (backends/images.py: `envmatrix images` prunes superseded ones)."""
        env = self.envs_of.get(tag)
        labels = images.labels(env.build_id, images.recipe_digest(folder / "Dockerfile", folder / "steps")) if env else {}
        need = diskspace.needed(images.previous_size(self.client, env.build_id) if env else None, env is None or env.cuda != "none")
        with self.lock:  # what the builds in flight will still take is not free for this one
            space_line = diskspace.require(diskspace.measure(self.client, args["BASE_IMAGE"]), need + self.reserved, f"building {tag}")
            self.reserved += need
        try:
            return self._build_labelled(folder, tag, args, log, labels=labels, preface=space_line)
        finally:
            with self.lock:
                self.reserved -= need

    def _build_labelled(self, folder: Path, tag: str, args: dict[str, str], log: Path, *, labels: dict[str, str], preface: str) -> Any:
        """Stream the build log into `log`, after `preface`; a failure names the step that failed."""
        from docker.errors import APIError

        step = "(before the first step)"
        with log.open("w") as out:
            out.write(f"{preface}\n" if preface else "")
            out.write(f"building {tag} with {json.dumps(args)}\n")
            try:
                for chunk in self.client.api.build(
                    path=str(folder), tag=tag, buildargs=args, rm=True, forcerm=True, decode=True, pull=False, labels=labels or {}
                ):
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

    def _flash_facts(self, tag: str) -> dict[str, object]:
        """flash-attn's build facts read back from the image: the record its Dockerfile step wrote, and the
        GPU architectures of the extension library it installed (copied out, read here with no GPU)."""
        container = self.client.containers.create(tag, ["true"], network_disabled=True, user="1000")
        try:
            text = _file_from(container, flashsource.IMAGE_RECORD).decode(errors="replace")
            try:
                facts, library = flashsource.image_facts(text)
            except ValueError as exc:
                raise BuildFailed(f"flash-attn's record in {tag}: {exc}") from None
            archs: dict[str, list[int]] = {"sass": [], "ptx": []}
            if library is not None:
                with tempfile.TemporaryDirectory(prefix="envmatrix-flash-") as tmp:
                    (Path(tmp) / Path(library).name).write_bytes(_file_from(container, library))
                    archs = elfarch.library_facts(Path(tmp), "*.so")
            return {**facts, "gpu_archs": archs}
        finally:
            container.remove(force=True)

    def _python_from(self, tag: str) -> str | None:
        """How the image got its Python, as its build step recorded it (read back, not predicted); None for an older image."""
        from docker.errors import NotFound

        container = self.client.containers.create(tag, ["true"], network_disabled=True, user="1000")
        try:
            return _file_from(container, PYTHON_RECORD).decode(errors="replace").strip() or None
        except NotFound:
            return None
        finally:
            container.remove(force=True)

    def _freeze(self, tag: str) -> list[str]:
        """The image's `pip freeze`, read until it comes (host/dockerfs.py run_briefly: `containers.run` can return b''
        for a fast container on a loaded engine, which recorded an empty freeze)."""
        code, text = dockerfs.run_briefly(self.client, tag, ["python", "-m", "pip", "freeze"], stderr=False, user="1000")
        if code != 0:
            raise BuildFailed(f"pip freeze in {tag} exited {code}")
        return [line for line in text.splitlines() if line.strip()]

    # ---- cells -----------------------------------------------------------------------------------

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        """One scenario: forked by its environment's helper, or in a container of its own."""
        user = _cell_user(out)
        log.parent.mkdir(parents=True, exist_ok=True)
        cmd = probe_command("python", scenario, Path("/out"), probe=PROBE_IN_IMAGE)
        threads = {k: v for k, v in ready.env.items() if k in THREAD_VARS}  # the runner's share of the cores
        note = fork_refusal(scenario) if self.fork else None
        if self.fork and note is None:
            argv = probe_argv(scenario, Path(RUNS_DIR) / out.name)
            done = self._run_forked(ready, argv, scenario.world_size, out, log, timeout=timeout, gpu_ids=gpu_ids, user=user, env=threads)
            if isinstance(done, Completed) or self.helpers.stopped:  # stopping (Ctrl-C): start nothing new
                return done if isinstance(done, Completed) else Completed(128 + signal.SIGKILL, False, 0.0)
            note = done
        completed = self._run_container(ready, cmd, out, log, timeout=timeout, gpu_ids=gpu_ids, user=user, env=threads)
        if note is not None:  # the record's log says why this cell was not forked
            with log.open("a") as fh:
                fh.write("\n" + LOG_NOTE.format(reason=note) + "\n")
        return replace(completed, launch=f"container of its own (fork helper not used: {note})" if note else "container of its own")

    def _options(self, user: str, gpu_ids: list[int], volumes: dict[str, dict[str, str]]) -> dict[str, Any]:
        """The container settings every probe process runs under, forked or not: the one owner of them (cells,
        the fork helper, gpu-check's NCCL check). NCCL between the ranks of a cell needs shared memory and
        IPC: every rank runs in the same container, so they share its IPC namespace; it stays private (not
        the host's, not shareable) and its /dev/shm is sized for NCCL's shared-memory transport (Docker's
        64 MB default is too small), with unlimited locked memory for pinned buffers. The GPUs are the
        device request's (by UUID, where nvidia-smi gave one): inside, the container sees only those, numbered from 0."""
        import docker

        options: dict[str, Any] = {
            "detach": True,
            "user": user,
            "network_mode": "none",  # no network; loopback (and /etc/hosts) stay for torchrun and gloo
            "hostname": "localhost",  # torchrun's rendezvous advertises the hostname: make it resolve to loopback
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "read_only": True,
            # exec: Docker mounts tmpfs noexec by default, and the shared libraries Triton, inductor, vLLM and
            # torch's extensions compile into their caches (under HOME, probes/caches.py) must load from there.
            # HOME is the cell user's own: over the image's folder Docker's tmpfs takes that folder's mode with
            # root as owner (measured: mode= is not applied), which the cell could not write
            "tmpfs": {"/tmp": "exec", HOME_IN_CONTAINER: f"exec,uid={user.split(':')[0]},gid={user.split(':')[1]}"},
            "init": True,  # a real init as PID 1: signals kill the probe as they would outside
            "shm_size": "2g",
            "ipc_mode": "private",  # whatever the engine's default-ipc-mode: no other container joins it
            "volumes": volumes,
            "environment": {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo", **caches.variables(CACHES_IN_CONTAINER, home=HOME_IN_CONTAINER)},
            "labels": {"envmatrix": "cell", "envmatrix.host": platform.node(), "envmatrix.runner": str(os.getpid())},
        }
        if gpu_ids:  # by UUID: the engine numbers the host's GPUs, which need not be this runner's numbering (a Slurm job's)
            options["device_requests"] = [docker.types.DeviceRequest(device_ids=self.gpus.device_ids(gpu_ids), capabilities=[["gpu"]])]
            if self.memlock_refused is None:
                options["ulimits"] = [docker.types.Ulimit(name="memlock", soft=-1, hard=-1)]
        return options

    def _started(self, image: str, command: list[str], options: dict[str, Any]) -> Any:
        """Create and start a container. An engine that may not lift the locked-memory limit (rootless, or itself in a
        container without CAP_SYS_RESOURCE: runc's "error setting rlimit type 8") gets the container again with its
        default limit, once for the run, said in every GPU cell's log: NCCL's pinned buffers may then fail, the cell does not."""
        from docker.errors import APIError

        settings = {k: v for k, v in options.items() if k != "detach"}
        container = self.client.containers.create(image, command, **settings)
        try:
            container.start()
            return container
        except APIError as exc:
            container.remove(force=True)
            if "ulimits" not in settings or "rlimit type 8" not in str(exc):
                raise
            self.memlock_refused = "the Docker engine may not lift the locked-memory limit (rlimit type 8: rootless or nested): containers keep its default"
        settings.pop("ulimits")
        container = self.client.containers.create(image, command, **settings)
        container.start()
        return container

    def _run_container(
        self, ready: Prepared, cmd: list[str], out: Path, log: Path, *, timeout: float, gpu_ids: list[int], user: str, env: dict[str, str] | None = None
    ) -> Completed:
        """One probe process in a container of its own; killed at the timeout; always removed."""
        from requests.exceptions import ConnectionError as RequestsConnectionError
        from requests.exceptions import ReadTimeout

        options = self._options(user, gpu_ids, {str(out.resolve()): {"bind": "/out", "mode": "rw"}})
        options["environment"] = {**options["environment"], **(env or {})}
        start = time.monotonic()
        container = self._started(str(ready.facts["image"]), cmd, options)
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
                if gpu_ids and self.memlock_refused:
                    fh.write(f"\n[envmatrix] {self.memlock_refused}\n".encode())
        finally:
            with self.lock:
                self.running.discard(container)
            container.remove(force=True)
        return Completed(code, timed_out, round(time.monotonic() - start, 3))

    # ---- a script as a cell (gpu-check) -----------------------------------------------------------

    def newest_cuda_image(self, driver: str | None) -> tuple[str, str] | None:
        """The newest probe image on this engine built on a CUDA base this driver runs, and its CUDA version
        (gpu-check runs in it: building one takes longer than the check may), or None."""
        found = []
        for image in self.client.images.list(name=IMAGES):
            env = dict(e.partition("=")[::2] for e in (image.attrs.get("Config") or {}).get("Env") or [])
            cuda = env.get("CUDA_VERSION")
            if cuda and image.tags and not (driver and driver_too_old(cuda, driver)):
                found.append((str(image.attrs.get("Created", "")), str(image.tags[0]), cuda))
        return max(found)[1:] if found else None

    def run_script(self, image: str, script: str, folder: Path, *, timeout: float, gpu_ids: list[int]) -> tuple[Completed, str]:
        """A Python script in a container of `image` under exactly a cell's settings (gpu-check's NCCL
        all-reduce: shared memory and IPC as cells get them): how it ended and what it printed."""
        out, log = folder / "out", folder / "container.log"
        user = _cell_user(out)
        (out / "check.py").write_text(script)
        ready = Prepared(python="python", seconds=0.0, reused=True, facts={"image": image})
        done = self._run_container(ready, ["python", "/out/check.py"], out, log, timeout=timeout, gpu_ids=gpu_ids, user=user)
        return done, log.read_text(errors="replace").partition("\n")[2]  # without the `$ docker run` line

    # ---- cells forked by a helper container -------------------------------------------------------

    def _start_helper(self, image: str, runs: Path, user: str, gpu_ids: list[int]) -> Helper:
        """A long-lived container of `image` running probes/forkserver.py, with the cells' security settings,
        the runs folder mounted and a host folder for its socket; removed when the helper is stopped."""
        import docker

        folder = Path(tempfile.mkdtemp(prefix="envmatrix-fork-"))
        uid, gid = (int(x) for x in user.split(":"))
        if os.getuid() == 0:
            os.chown(folder, uid, gid)
        folder.chmod(0o700)
        volumes = {str(runs): {"bind": RUNS_DIR, "mode": "rw"}, str(folder): {"bind": HELPER_DIR, "mode": "rw"}}
        options = self._options(user, [], volumes)
        options["labels"] = {**options["labels"], "envmatrix.helper": image}
        if gpu_ids:  # every GPU of this runner (never the host's others); each cell picks its own by UUID
            runner = [g.index for g in self.gpus.devices] or gpu_ids
            options["device_requests"] = [docker.types.DeviceRequest(device_ids=self.gpus.device_ids(runner), capabilities=[["gpu"]])]
            options["ulimits"] = [docker.types.Ulimit(name="memlock", soft=-1, hard=-1)]
        command = ["python", str(FORKSERVER_IN_IMAGE), "--socket", f"{HELPER_DIR}/helper.sock", "--room", " " * CMDLINE_ROOM]
        container = self._started(image, command, options)

        def stop() -> None:
            with contextlib.suppress(Exception):  # already gone
                container.remove(force=True)
            shutil.rmtree(folder, ignore_errors=True)

        def alive() -> bool:
            try:
                container.reload()
            except Exception:  # removed
                return False
            return bool(container.status == "running")

        def why_dead() -> str:
            try:
                tail = container.logs().decode(errors="replace").strip().splitlines()[-3:]
            except Exception:
                tail = ["(no logs)"]
            return " | ".join(tail)

        try:
            sock, hello = connect_when_ready(folder / "helper.sock", alive, why_dead)
        except HelperFailed:
            stop()
            raise
        return helper_from_hello(folder / "helper.sock", sock, hello, stop=stop, alive=alive, shares_pids=False)

    def _run_forked(
        self, ready: Prepared, argv: list[str], ranks: int, out: Path, log: Path, *, timeout: float, gpu_ids: list[int], user: str, env: dict[str, str]
    ) -> Completed | str:
        """One cell (its `ranks` ranks) forked in its environment's helper container: the same log and exit
        status as a container of its own (a death by signal N reads 128+N, as from the container's init);
        or why not."""
        image, runs = str(ready.facts["image"]), out.parent.resolve()
        key = f"{image}|{runs}|{user}|{bool(gpu_ids)}"
        helper = self.helpers.helper(key, lambda: self._start_helper(image, runs, user, gpu_ids))
        if isinstance(helper, str):
            return helper
        inner = out / CELL_LOG
        inner.unlink(missing_ok=True)
        # the helper container numbers its GPUs its own way: by UUID, or its own indexes where vLLM cannot take UUIDs
        packages = dict(self.envs_of[image].packages) if image in self.envs_of else {}
        names = gpunames.in_container(self.gpus, gpu_ids, [g.index for g in self.gpus.devices] or gpu_ids, packages)
        env = {**env, **visible_devices(gpu_ids, names)}
        cmd = ["python", str(PROBE_IN_IMAGE), *argv]
        request = {"argv": argv, "argv0": str(PROBE_IN_IMAGE), "cmdline": cmd, "log": f"{RUNS_DIR}/{out.name}/{CELL_LOG}", "env": env, "ranks": ranks}
        try:
            ended = run_forked(helper, request, timeout=timeout, kills=((signal.SIGKILL, HARD_S),))
        except HelperFailed as exc:
            if self.helpers.stopped:  # Ctrl-C removed the helper under this cell: the runner drops it
                return Completed(128 + signal.SIGKILL, False, 0.0)
            self.helpers.failed(key, helper, str(exc))
            inner.unlink(missing_ok=True)
            return f"{exc} while serving this cell"
        if ended.status is None:
            self.helpers.failed(key, helper, "it did not report a killed cell")
        with log.open("wb") as fh:
            fh.write(("$ docker run " + image + " " + " ".join(cmd) + "\n").encode())
            if inner.exists():
                fh.write(inner.read_bytes())
            if ended.timed_out:
                fh.write(f"\n[envmatrix] killed after the {timeout:g} s timeout\n".encode())
            if gpu_ids and self.memlock_refused:
                fh.write(f"\n[envmatrix] {self.memlock_refused}\n".encode())
        inner.unlink(missing_ok=True)
        if ended.status is None:
            code = 128 + signal.SIGKILL
        elif os.WIFSIGNALED(ended.status):
            code = 128 + os.WTERMSIG(ended.status)
        else:
            code = os.waitstatus_to_exitcode(ended.status)
        return Completed(code, ended.timed_out, ended.seconds, launch=forked_launch(ranks, " in the environment's container"))

    def stop_all(self) -> None:
        self.helpers.stop_all()
        with self.lock:
            containers = list(self.running)
        for container in containers:
            try:
                container.remove(force=True)
            except Exception:  # already gone: nothing left to stop
                continue
