"""What the host offers: every GPU (via nvidia-smi, read once) with its driver, memory and compute
capability, mapped to the matrix's GPU names."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from ..facts.catalog import gpu_from_smi_name

#: One line per GPU: `0, NVIDIA H20, 550.54.15, 97871, 9.0, GPU-5e1c…` (as `--format=csv,noheader,nounits` prints it).
#: The UUID names a GPU the same way for every process and for Docker, whatever numbering each sees.
QUERY = "--query-gpu=index,name,driver_version,memory.total,compute_cap,uuid"


@dataclass(frozen=True)
class HostGpu:
    """One GPU as nvidia-smi reports it, and the matrix GPU type its name maps to (None if unknown)."""

    index: int
    name: str
    driver: str
    memory_mib: int | None
    compute_cap: str | None
    matrix_name: str | None
    uuid: str | None = None


@dataclass(frozen=True)
class HostGpus:
    """The GPUs nvidia-smi lists: their raw names, the matrix type of the first (the host's), and each GPU's facts."""

    names: tuple[str, ...]
    matrix_name: str | None
    devices: tuple[HostGpu, ...] = ()
    problem: str | None = None  # nvidia-smi is there but failed: the driver cannot be talked to

    @property
    def count(self) -> int:
        """How many GPUs a scheduler may hand out."""
        return len(self.names)

    @property
    def driver(self) -> str | None:
        """The NVIDIA driver version (one per host), None without a GPU."""
        return self.devices[0].driver if self.devices else None

    def device_ids(self, gpu_ids: list[int]) -> list[str]:
        """The GPUs at these nvidia-smi indexes as Docker and CUDA should be told them: by UUID where nvidia-smi gave one (an
        index means another GPU to a daemon or a container that numbers GPUs its own way), else by index."""
        uuids = {g.index: g.uuid for g in self.devices}
        return [uuids.get(i) or str(i) for i in gpu_ids]

    def types(self) -> dict[str, list[int]]:
        """Matrix GPU type → the indexes of this host's GPUs of that type (unknown names left out)."""
        out: dict[str, list[int]] = {}
        for gpu in self.devices:
            if gpu.matrix_name:
                out.setdefault(gpu.matrix_name, []).append(gpu.index)
        return out


def visible_devices(gpu_ids: list[int], names: list[str] | None = None) -> dict[str, str]:
    """The environment that shows a process exactly these GPUs, by nvidia-smi's indexes (or `names`, their UUIDs, where
    the process numbers GPUs its own way: a container given some of them). CUDA numbers devices fastest first unless told
    to use PCI bus order, nvidia-smi's order: on a mixed host the two differ, and index 2 could be another type's GPU.
    Empty for no GPUs (a CPU cell)."""
    if not gpu_ids:
        return {}
    return {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(names or map(str, gpu_ids))}


def _visible(devices: tuple[HostGpu, ...], environ: dict[str, str]) -> tuple[HostGpu, ...]:
    """The GPUs this runner was given: a CUDA_VISIBLE_DEVICES set for it (a scheduler's allocation, a user's choice) names
    them by index or UUID, and the runner never hands out another; unset, every GPU nvidia-smi lists."""
    given = environ.get("CUDA_VISIBLE_DEVICES")
    if given is None:
        return devices
    wanted = [w.strip() for w in given.split(",") if w.strip()]
    if any(w.startswith("-") for w in wanted):  # CUDA stops at the first invalid entry: none after it is visible
        wanted = wanted[: next(i for i, w in enumerate(wanted) if w.startswith("-"))]
    return tuple(g for g in devices if str(g.index) in wanted or (g.uuid and any(g.uuid.startswith(w) and w.startswith("GPU-") for w in wanted)))


def parse_query(text: str) -> tuple[HostGpu, ...]:
    """The GPUs of `nvidia-smi QUERY --format=csv,noheader,nounits` output; lines that do not parse are left out."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) not in (5, 6) or not cells[0].isdigit() or not cells[1]:
            continue
        memory = int(float(cells[3])) if cells[3].replace(".", "", 1).isdigit() else None
        cap = cells[4] if cells[4] not in ("", "[N/A]", "N/A") else None
        uuid = cells[5] if len(cells) == 6 and cells[5].startswith("GPU-") else None
        gpus.append(HostGpu(int(cells[0]), cells[1], cells[2], memory, cap, gpu_from_smi_name(cells[1]), uuid))
    return tuple(gpus)


def detect_gpus() -> HostGpus:
    """Ask nvidia-smi once; no binary or no GPU means the `cpu` runner; a failing driver too, with the problem kept."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return HostGpus((), "cpu")
    try:
        done = subprocess.run([smi, QUERY, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return HostGpus((), "cpu", problem=f"nvidia-smi could not run: {exc}")
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        return HostGpus((), "cpu", problem=f"nvidia-smi exited {done.returncode}: {said[0] if said else 'no output'}")
    devices = _visible(parse_query(done.stdout), dict(os.environ))
    if not devices:
        return HostGpus((), "cpu")
    return HostGpus(tuple(g.name for g in devices), devices[0].matrix_name, devices)


def default_profile(gpus: HostGpus) -> str:
    """`gpu` on a GPU host, `cpu` elsewhere."""
    return "cpu" if gpus.count == 0 else "gpu"
