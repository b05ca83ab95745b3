"""The GPU path issue 35 read line by line, checked where it can fail: a real CUDA driver (is_available()
initialises it and torch's own flag stays False; the NVML check does not), and the probe in the probe image
through the fork helper with flash-attn and with vLLM (the docker backend on a GPU runner). Skipped without a
GPU (and without a Docker engine with the NVIDIA runtime), saying why."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envmatrix.host.gpus import detect_gpus
from envmatrix.plan.eligibility import driver_too_old

ROOT = Path(__file__).resolve().parents[2]
GPUS = detect_gpus()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(GPUS.count == 0, reason=f"needs an NVIDIA GPU; this host has none{f' ({GPUS.problem})' if GPUS.problem else ''}"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch with CUDA in this interpreter"),
]

STATE = (
    "import sys, torch\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from probes import forkserver\n"
    "available = torch.cuda.is_available()\n"
    "print(available, torch.cuda.is_initialized(), forkserver.cuda_driver_state() is not None)\n"
)


def driver_state(nvml: bool) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_NVML_BASED_CUDA_CHECK"}
    if nvml:
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    done = subprocess.run([sys.executable, "-c", STATE, str(ROOT)], capture_output=True, text=True, timeout=300, env=env, check=True)
    return done.stdout.split()


def test_is_available_initialises_the_driver_unseen_by_torchs_flag_and_the_helper_sees_it() -> None:
    assert driver_state(nvml=False) == ["True", "False", "True"]  # the fork helper's check catches what torch's flag misses


def test_the_nvml_check_leaves_the_driver_uninitialised() -> None:
    assert driver_state(nvml=True) == ["True", "False", "False"]  # what the helper's imports run with


def docker_gpu_engine() -> str | None:
    """Why the docker backend cannot run GPU cells here, or None."""
    try:
        from envmatrix.backends.docker import connect

        client = connect()
    except Exception as exc:
        return f"no Docker engine ({exc})"
    if "nvidia" not in ((client.info() or {}).get("Runtimes") or {}):
        return "the Docker engine has no NVIDIA runtime"
    return None


@pytest.mark.parametrize(
    ("packages", "scenario", "settings"),
    [
        ({"flash_attn": "2.8.3", "torch": "2.8.0", "cuda": "12.8", "transformers": "4.57.6"}, "bf16-fa2", {"dtype": "bf16", "attn": "flash_attention_2"}),
        (
            {"torch": "2.13.0", "cuda": "13.0", "transformers": "5.17.0", "trl": "1.16.0", "vllm": "0.31.0"},
            "trl-vllm-colocate",
            {"trainer": "trl", "dtype": "bf16", "use_vllm": True},
        ),
    ],
    ids=["flash-attn", "vllm"],
)
def test_the_probe_trains_in_the_probe_image_through_the_fork_helper(
    tmp_path: Path, packages: dict[str, str], scenario: str, settings: dict[str, object]
) -> None:
    old = driver_too_old(packages["cuda"], GPUS.driver) if GPUS.driver else None
    if old:  # the vLLM case's CUDA 13 build on a driver below 580: the host cannot run it, the stack is not at fault
        pytest.skip(old)
    why = docker_gpu_engine()
    if why:
        pytest.skip(why)
    gpu = next(iter(GPUS.types()))
    extra = {k: v for k, v in packages.items() if k in ("trl", "vllm")}
    profile = {
        "cuda": [packages["cuda"]],
        "torch": [packages["torch"]],
        "transformers": [packages["transformers"]],
        "flash_attn": [packages.get("flash_attn", "none")],
        "gpu": [gpu],
        "python": ["3.12"],
        **({"packages": {k: [v] for k, v in extra.items()}} if extra else {}),
    }
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump({"version": 1, "profiles": {"gpu": profile}, "scenarios": {scenario: settings}}))
    cmd = [sys.executable, "-m", "envmatrix", "run", "--file", str(matrix), "--profile", "gpu", "--backend", "docker", "--reports", str(tmp_path / "r")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=5400, cwd=ROOT)
    records = [json.loads(p.read_text()) for p in (tmp_path / "r" / "results").glob("*.json")]
    assert done.returncode == 0 and records, done.stdout[-4000:] + done.stderr[-2000:]
    (record,) = records
    assert record["launch"].startswith("forked"), record["launch"]  # the helper forked it: the driver was not initialised
    assert record["outcome"]["class"] == "ok", record["outcome"]
    if "flash_attn" in packages:  # provenance read back from the image as the venv backend records it
        flash = record["environment"]["build"]["flash_attn"]
        assert flash["sha256"] and flash["origin"].startswith("https://") and flash["gpu_archs"]["sass"]
