"""Versions and hardware read at run time inside the environment under test, never assumed from the plan."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from typing import Any

import torch
import transformers


def dist_version(name: str) -> str | None:
    """An installed distribution's version, or None when it is absent."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment_facts(device: torch.device) -> dict[str, Any]:
    """result.json's `env`: what this process actually runs on."""
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False)),
        "transformers": transformers.__version__,
        "tokenizers": dist_version("tokenizers"),
        "flash_attn": dist_version("flash-attn") or dist_version("flash_attn"),
        "peft": dist_version("peft"),
        "device": str(device),
        "cudnn": None,
        "cublas": dist_version("nvidia-cublas-cu12") or dist_version("nvidia-cublas"),
        "nccl": None,
        "gpu_name": None,
        "compute_capability": None,
        "driver": None,
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        facts["cudnn"] = torch.backends.cudnn.version()
        facts["gpu_name"] = torch.cuda.get_device_name(device)
        facts["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # NCCL may be absent from a build: report, do not fail
            facts["nccl"] = f"unavailable: {exc}"
        facts["driver"] = driver_version()
    return facts


def driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
