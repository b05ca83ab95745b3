"""Simulated runners for the ordinary test layers: a fake nvidia-smi on PATH that answers the query as the
real one prints it, and a fake backend that writes what a probe would (result.json, metrics.jsonl, a log)
without torch, so the runner's own logic runs in milliseconds on a machine without a GPU."""

from __future__ import annotations

import json
import stat
import threading
import time
from pathlib import Path
from types import TracebackType

from records_factory import device_facts

from envmatrix.backends import BuildFailed, Prepared
from envmatrix.host.gpus import QUERY, HostGpus
from envmatrix.plan.builds import Build
from envmatrix.run.execute import Completed
from envmatrix.spec.matrix import Scenario

HEALTHY_METRICS = [{"step": i, "loss": 0.1, "grad_norm": 0.5} for i in (1, 2, 3)]


#: A mixed host: A100s at indexes 0 and 2, H20s at 1 and 3 (name, driver, MiB, compute capability).
MIXED = [
    ("NVIDIA A100-SXM4-80GB", "570.86.15", 81920, "8.0"),
    ("NVIDIA H20", "570.86.15", 97871, "9.0"),
    ("NVIDIA A100-SXM4-80GB", "570.86.15", 81920, "8.0"),
    ("NVIDIA H20", "570.86.15", 97871, "9.0"),
]


def smi_lines(gpus: list[tuple[str, str, int, str]]) -> str:
    """What `nvidia-smi QUERY --format=csv,noheader,nounits` prints for these GPUs, indexed in order."""
    return "".join(f"{i}, {name}, {driver}, {mib}, {cc}, {fake_uuid(i)}\n" for i, (name, driver, mib, cc) in enumerate(gpus))


def fake_uuid(index: int) -> str:
    """A GPU UUID as nvidia-smi prints one, for the fake GPU at `index`."""
    return f"GPU-{index:08x}-5e1c-4f2a-9d3b-00000000{index:04x}"


def fake_smi(folder: Path, gpus: list[tuple[str, str, int, str]], *, fail: str | None = None) -> Path:
    """A nvidia-smi that answers `QUERY --format=csv,noheader,nounits` with these GPUs (name, driver, MiB, cc),
    or fails as a broken driver does."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = smi_lines(gpus).replace("\n", "\\n")
    body = f'echo "{fail}"; exit 9' if fail else f'[ "$1" = "{QUERY}" ] || exit 2\nprintf "{lines}"'
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder


class FakeBackend:
    """Records every call; `fail_prepare` / `raise_prepare` / `raise_run` choose what goes wrong where."""

    name = "fake"

    def __init__(self, *, fail_prepare: set[str] = frozenset(), raise_prepare: set[str] = frozenset(), raise_run: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.fail_prepare, self.raise_prepare, self.raise_run = fail_prepare, raise_prepare, raise_run
        self.prepared: list[str] = []
        self.ran: list[tuple[str, list[int]]] = []
        self.entered = self.exited = 0
        self.stopped = 0
        self.delay = 0.0
        self.seen = "cpu"  # the device the fake probe reports
        self.lock = threading.Lock()

    def __enter__(self) -> FakeBackend:
        self.entered += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.exited += 1

    def prepare(self, build: Build, log: Path) -> Prepared:
        self.prepared.append(build.build_id)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("preparing\n")
        if build.env.transformers in self.fail_prepare:
            raise BuildFailed(f"{build.build_id}: install transformers failed")
        if build.env.transformers in self.raise_prepare:
            raise RuntimeError("docker API said no")
        return Prepared(python="python", seconds=0.1, reused=False, facts={"tool": "fake", "freeze": ["six==1.16.0"]})

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        with self.lock:
            self.ran.append((scenario.name, gpu_ids))
        if scenario.name in self.raise_run:
            raise ConnectionError("engine went away")
        time.sleep(self.delay)
        out.mkdir(parents=True, exist_ok=True)
        result = {
            "env": device_facts(self.device(gpu_ids)),
            "probe_version": "2",
            "finished": True,
            "steps_completed": 3,
            "stage": "done",
            "params": {"trainable": 2, "with_grad": 2, "changed": 2},
        }
        (out / "result.json").write_text(json.dumps(result))
        (out / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in HEALTHY_METRICS))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(json.dumps(m) + "\n" for m in HEALTHY_METRICS))
        return Completed(0, False, 0.01)

    def device(self, gpu_ids: list[int]) -> str:
        """The GPU type the fake probe reports for the GPUs it was given."""
        return self.seen

    def stop_all(self) -> None:
        self.stopped += 1


class MixedHost(FakeBackend):
    """The fake probe sees the type of the GPUs it was handed ("mixed" when they are not all one type)."""

    def __init__(self, gpus: HostGpus) -> None:
        super().__init__()
        self.type_of = {g.index: g.matrix_name for g in gpus.devices}

    def device(self, gpu_ids: list[int]) -> str:
        types = {self.type_of[i] for i in gpu_ids}
        return str(types.pop()) if len(types) == 1 else "mixed"


class FakeContainer:
    """A container that ends with `code` (or hangs until killed, then ends 137), and says `output`."""

    def __init__(self, code: int = 0, output: bytes = b"probe output\n", *, hangs: bool = False) -> None:
        self.code, self.output, self.hangs = code, output, hangs
        self.name, self.status, self.labels = "fake", "running", {}
        self.killed = self.removed = False
        self.refuse_start: list[str] = []  # engine errors the next starts raise, in order (docker.errors.APIError)

    def start(self) -> None:
        if self.refuse_start:
            from docker.errors import APIError

            raise APIError(self.refuse_start.pop(0))
        self.removed = False

    def wait(self, timeout: float) -> dict[str, int]:
        if self.hangs and not self.killed:
            from requests.exceptions import ReadTimeout

            raise ReadTimeout("the timeout passed")
        return {"StatusCode": 137 if self.killed else self.code}

    def kill(self) -> None:
        self.killed = True

    def logs(self, stdout: bool = True, stderr: bool = True, stream: bool = False) -> object:
        return iter([self.output]) if stream else self.output

    def reload(self) -> None:
        if self.removed:
            raise RuntimeError("no such container")

    def remove(self, force: bool = False) -> None:
        self.removed = True


class FakeImage:
    """A local image: its tag, the environment its base set (CUDA_VERSION for an nvidia/cuda base) and when it was made."""

    def __init__(self, tag: str, cuda: str | None = None, created: str = "2026-01-01T00:00:00Z") -> None:
        self.tags = [tag]
        self.attrs = {"Created": created, "Config": {"Env": ["PATH=/opt/venv/bin", *([f"CUDA_VERSION={cuda}"] if cuda else [])]}}


class FakeImages:
    def __init__(self, images: list[FakeImage]) -> None:
        self.images = images

    def list(self, name: str = "") -> list[FakeImage]:
        return [i for i in self.images if i.tags[0].split(":")[0] == name]


class FakeContainers:
    def __init__(self, client: FakeDocker) -> None:
        self.client = client

    def run(self, image: str, command: list[str], **options: object) -> FakeContainer:
        self.client.started.append((image, command, options))
        return self.client.container

    def create(self, image: str, command: list[str], **options: object) -> FakeContainer:
        """What the backend starts itself (create, then start): recorded as `run` records it."""
        self.client.started.append((image, command, options))
        return self.client.container

    def list(self, **filters: object) -> list[FakeContainer]:
        return []


class FakeDocker:
    """A Docker client that records every `containers.run` (image, command, options) and answers with
    `container`; `runtimes` are what `info()` lists (the NVIDIA runtime by default), `images` what is local."""

    def __init__(self, container: FakeContainer | None = None, runtimes: tuple[str, ...] = ("runc", "nvidia"), images: list[FakeImage] | None = None) -> None:
        self.container = container or FakeContainer()
        self.runtimes = runtimes
        self.started: list[tuple[str, list[str], dict[str, object]]] = []
        self.containers = FakeContainers(self)
        self.images = FakeImages(images or [])

    def info(self) -> dict[str, object]:
        return {"Runtimes": {name: {} for name in self.runtimes}}
