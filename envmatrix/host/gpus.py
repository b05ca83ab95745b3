"""What the host offers: GPUs (via nvidia-smi) mapped to the matrix's GPU names."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from ..facts.catalog import gpu_from_smi_name


@dataclass(frozen=True)
class HostGpus:
    """The GPUs nvidia-smi lists: their raw names, and the matrix name they map to (None if unknown)."""

    names: tuple[str, ...]
    matrix_name: str | None

    @property
    def count(self) -> int:
        """How many GPUs a scheduler may hand out."""
        return len(self.names)


def detect_gpus() -> HostGpus:
    """Ask nvidia-smi; no binary, a failing driver or no GPU all mean the `cpu` runner."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return HostGpus((), "cpu")
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return HostGpus((), "cpu")
    names = tuple(line.strip() for line in out.splitlines() if line.strip())
    if not names:
        return HostGpus((), "cpu")
    return HostGpus(names, gpu_from_smi_name(names[0]))


def default_profile(gpus: HostGpus) -> str:
    """`gpu` on a GPU host, `cpu` elsewhere."""
    return "cpu" if gpus.count == 0 else "gpu"
