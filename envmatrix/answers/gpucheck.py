"""`envmatrix gpu-check`: is this GPU runner ready for the matrix? One line per check, in minutes.

Each check runs for real on the host: the driver against every CUDA build of the profile (the catalog's
minimums), the NVIDIA container toolkit and a container really given a GPU, bf16 support, a 2-GPU NCCL all-reduce on the
host and in a container with a cell's settings, one flash-attn import, and the probe's kernel stage at
reduced sizes. Checks that need what this host lacks (two GPUs of one type, flash-attn, a Docker engine
with the NVIDIA runtime, a probe image with CUDA) say `skip` and why; a failing one says what to do.
Without a GPU there is nothing to check: exit 3 (BackendError) saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError
from ..host.gpus import HostGpus, visible_devices
from ..plan.eligibility import driver_too_old
from ..run.execute import PROBE
from ..spec.matrix import Profile

PASS, FAIL, SKIP = "pass", "FAIL", "skip"
NO_TORCH = "No module named 'torch'"
WHY_NO_TORCH = (
    f"no torch in {sys.executable}: run gpu-check with an interpreter that has the GPU stack (e.g. a matrix venv's bin/python -m envmatrix gpu-check)"
)
CHECK_TIMEOUT_S = 120


@dataclass(frozen=True)
class Check:
    """One check's verdict and its line."""

    name: str
    status: str
    detail: str

    @property
    def line(self) -> str:
        return f"{self.status:4}  {self.name}: {self.detail}"


def _python(code: str, *args: str, timeout: float = CHECK_TIMEOUT_S, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a snippet (or with `code` "", a script and its arguments) in this interpreter, the GPU stack under
    test, with `env` added to this environment: its exit status and last output line."""
    argv = [sys.executable, *(["-c", code] if code else []), *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        return 124, f"did not finish in {timeout:g} s"
    said = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, said[-1] if said else "no output"


def check_driver(gpus: HostGpus, profile: Profile) -> Check:
    lows = sorted({why for cuda in profile.axes["cuda"] if cuda != "none" and (why := driver_too_old(cuda, gpus.driver or ""))})
    if lows:
        return Check("driver", FAIL, f"{len(lows)} of the profile's CUDA builds cannot run: " + "; ".join(lows))
    return Check("driver", PASS, f"{gpus.driver} runs every CUDA build of the profile ({', '.join(c for c in profile.axes['cuda'] if c != 'none')})")


def check_container_runtime(gpus: HostGpus, _: Profile) -> Check:
    """The NVIDIA container toolkit as the docker backend needs it (a registered runtime, its hook or a CDI spec: the
    backend's own rule), then a container really given one of this runner's GPUs: a toolkit that is set up but cannot
    serve (`--gpus` starts a container without the device, or fails) shows only there (host/dockerfs.py)."""
    name = "container runtime"
    try:
        from ..backends.docker import DockerBackend, connect

        backend = DockerBackend(client=connect(), gpus=gpus)
    except BackendError as exc:
        return Check(name, SKIP, f"{exc} (the venv backend runs without one)")
    try:
        backend.require_gpu_runtime()
    except BackendError as exc:
        return Check(name, FAIL, str(exc))
    found = backend.newest_cuda_image(gpus.driver)
    if found is None:
        return Check(name, SKIP, "the toolkit is set up, but no container with a GPU was tried: no probe image with CUDA on this engine yet")
    try:
        backend.try_gpu_container(found[0])
    except BackendError as exc:
        return Check(name, FAIL, str(exc))
    return Check(name, PASS, f"a container of {found[0]} given GPU {gpus.devices[0].index} started and has the NVIDIA device")


def check_bf16(_: HostGpus, __: Profile) -> Check:
    code, said = _python(
        "import torch; x = torch.ones(64, 64, device='cuda', dtype=torch.bfloat16); print(torch.cuda.is_bf16_supported(), float((x @ x)[0, 0]))"
    )
    if code != 0:
        return Check("bf16", FAIL, f"torch could not run a bf16 matmul here: {said}")
    supported, value = said.split()
    return Check("bf16", PASS if supported == "True" and float(value) == 64.0 else FAIL, f"is_bf16_supported {supported}, 64x64 matmul gives {value}")


#: Two ranks all-reduce over NCCL on two GPUs (argument `gloo`: on the CPU, how the tests run it). A file, not
#: `-c`: spawned ranks import the main module by its path, so the start is guarded by __main__.
NCCL = """
import socket, sys, torch, torch.distributed as dist, torch.multiprocessing as mp

def rank(r, backend, port):
    device = "cuda" if backend == "nccl" else "cpu"
    if device == "cuda":
        torch.cuda.set_device(r)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=r, world_size=2)
    t = torch.full((1024,), float(r + 1), device=device)
    dist.all_reduce(t)
    assert float(t[0]) == 3.0, float(t[0])
    dist.destroy_process_group()

if __name__ == "__main__":
    backend = sys.argv[1] if len(sys.argv) > 1 else "nccl"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank, args=(backend, port), nprocs=2)
    print(f"all-reduce over 2 ranks ({backend}) gave 3.0")
"""


def nccl_pair(gpus: HostGpus) -> list[int] | None:
    """Two GPUs of one type, as a DDP cell gets them (a mixed host: never an A100 with an H20), or None."""
    return next((ids[:2] for ids in gpus.types().values() if len(ids) >= 2), None)


def _no_pair(gpus: HostGpus) -> str:
    have = ", ".join(f"{len(ids)} {gpu}" for gpu, ids in gpus.types().items()) or f"{gpus.count} not in the catalog"
    return f"needs 2 GPUs of one type; this host has {have}"


def check_nccl(gpus: HostGpus, _: Profile) -> Check:
    pair = nccl_pair(gpus)
    if pair is None:
        return Check("nccl all-reduce", SKIP, _no_pair(gpus))
    with tempfile.TemporaryDirectory(prefix="envmatrix-gpucheck-") as tmp:
        script = Path(tmp) / "nccl_check.py"
        script.write_text(NCCL)
        code, said = _python("", str(script), env=visible_devices(pair))
    if NO_TORCH in said:
        return Check("nccl all-reduce", SKIP, WHY_NO_TORCH)
    return Check("nccl all-reduce", PASS if code == 0 else FAIL, said)


def check_nccl_container(gpus: HostGpus, _: Profile) -> Check:
    """The all-reduce in a container started by the docker backend exactly as a cell's (its device requests,
    shared memory and IPC), in the newest probe image with a CUDA this driver runs."""
    name = "nccl all-reduce in a container"
    pair = nccl_pair(gpus)
    if pair is None:
        return Check(name, SKIP, _no_pair(gpus))
    from ..backends.docker import DockerBackend, connect

    try:
        backend = DockerBackend(client=connect(), gpus=gpus)
        backend.require_gpu_runtime()
    except BackendError as exc:
        return Check(name, SKIP, str(exc))
    found = backend.newest_cuda_image(gpus.driver)
    if found is None:
        return Check(name, SKIP, f"no probe image with a CUDA driver {gpus.driver} runs on this engine: run the gpu profile once with --backend docker")
    image, cuda = found
    with backend, tempfile.TemporaryDirectory(prefix="envmatrix-gpucheck-") as tmp:
        done, said = backend.run_script(image, NCCL, Path(tmp), timeout=CHECK_TIMEOUT_S, gpu_ids=pair)
    lines = said.strip().splitlines()
    where = f"{image} (CUDA {cuda}), GPUs {','.join(map(str, pair))}"
    if done.timed_out:
        return Check(name, FAIL, f"did not finish in {CHECK_TIMEOUT_S} s in {where}")
    return Check(name, PASS if done.exit_code == 0 else FAIL, f"{lines[-1] if lines else 'no output'} in {where}")


def check_flash_attn(_: HostGpus, __: Profile) -> Check:
    code, said = _python("import flash_attn, flash_attn_2_cuda; print(flash_attn.__version__)")
    if code != 0 and "No module named 'flash_attn'" in said:
        return Check("flash-attn", SKIP, "flash-attn is not installed in this interpreter (the matrix installs it per environment)")
    return Check("flash-attn", PASS if code == 0 else FAIL, f"imports ({said})" if code == 0 else f"does not import: {said}")


def check_kernels(_: HostGpus, __: Profile) -> Check:
    with tempfile.TemporaryDirectory(prefix="envmatrix-gpucheck-") as out:
        code, said = _python("", str(PROBE), "--out", out, "--kernels", "reduced", "--steps", "1", timeout=240)
    if NO_TORCH in said:
        return Check("kernel stage", SKIP, WHY_NO_TORCH)
    return Check("kernel stage", PASS if code == 0 else FAIL, said)


CHECKS: tuple[Callable[[HostGpus, Profile], Check], ...] = (
    check_driver,
    check_container_runtime,
    check_bf16,
    check_nccl,
    check_nccl_container,
    check_flash_attn,
    check_kernels,
)


def run_checks(gpus: HostGpus, profile: Profile, emit: Callable[[Check], None]) -> list[Check]:
    """Every check, each line emitted as it is known; BackendError (exit 3) without a GPU."""
    if gpus.count == 0:
        why = f" ({gpus.problem})" if gpus.problem else ""
        raise BackendError(f"no GPU on this host{why}: gpu-check tests a GPU runner; on a CPU machine run nox -s matrix (the cpu profile)")
    done = []
    for check in CHECKS:
        result = check(gpus, profile)
        emit(result)
        done.append(result)
    return done
