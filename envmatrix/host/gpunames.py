"""How a forked cell in the helper's container is told its GPUs: by UUID where everything in it accepts one, else
by the container's own indexes.

CUDA takes GPU UUIDs in CUDA_VISIBLE_DEVICES, and a UUID names the same GPU whatever numbering a process sees. vLLM
did not: its platform code read each entry with `int()` (vllm/platforms/interface.py,
`device_id_to_physical_device_id`), so a UUID raised `ValueError: invalid literal for int()` at engine start (vLLM
issues #6551, #32569, #41848 on 0.20.1, PR #46132 reproducing it on 0.10.0): a false breakage for every vLLM cell.
UUIDs are resolved through NVML since PR #45026 ("Stop setting CUDA_VISIBLE_DEVICES internally in vLLM, add device_ids
arg", commit ebfbcfe, merged to main 2026-06-20). v0.23.0 was released on 2026-06-14, before it; v0.24.0, released on
2026-07-01, is the first release after it (`VLLM_UUID_SINCE`; that its branch holds the merge is read from the dates,
not from the tag). Every release before is named by indexes, which all releases take.

Indexes inside the helper's container: the container was given this runner's GPUs, and CUDA (with CUDA_DEVICE_ORDER
PCI_BUS_ID) numbers them from 0 in PCI bus order, which is nvidia-smi's index order; so a GPU's index there is its
place among the runner's GPUs sorted by nvidia-smi index.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from .gpus import HostGpus

VLLM_UUID_SINCE = Version("0.24.0")
VLLM_PACKAGES = ("vllm",)


def accepts_uuids(packages: dict[str, str]) -> bool:
    """Whether every package of the environment takes GPU UUIDs in CUDA_VISIBLE_DEVICES (no vLLM, or one at least
    VLLM_UUID_SINCE); an unreadable vLLM version counts as one that does not."""
    for name in VLLM_PACKAGES:
        version = packages.get(name, "none")
        if version == "none":
            continue
        try:
            if Version(version) < VLLM_UUID_SINCE:
                return False
        except InvalidVersion:
            return False
    return True


def in_container(gpus: HostGpus, gpu_ids: list[int], runner_ids: list[int], packages: dict[str, str]) -> list[str]:
    """The CUDA_VISIBLE_DEVICES entries for GPUs `gpu_ids` (nvidia-smi indexes) in a container given `runner_ids`."""
    if accepts_uuids(packages):
        return gpus.device_ids(gpu_ids)
    order = sorted(runner_ids)
    return [str(order.index(i)) for i in gpu_ids]
