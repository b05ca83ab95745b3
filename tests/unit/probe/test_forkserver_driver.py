"""The fork helper's decision knows whether the CUDA driver was initialised, not only torch's own flag: a
`torch.cuda.is_available()` (transformers calls it at import with flash-attn installed) runs cuInit and leaves
`torch.cuda.is_initialized()` False, and a CUDA driver never survives fork. Simulated where no GPU exists with a
stand-in libcuda (tests/data/fakecuda) that answers as the driver API does; tests/gpu checks the real one."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from probes import forkserver

ROOT = Path(__file__).resolve().parents[3]
FAKE = ROOT / "tests" / "data" / "fakecuda" / "libcuda.c"


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("needs gcc to build the stand-in CUDA driver library")
    out = tmp_path_factory.mktemp("fakecuda") / "libcuda.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(FAKE)], check=True)
    return out


def state_in_a_process(libcuda: Path, *, load: bool, init: bool) -> str:
    """cuda_driver_state() as a fresh process that loaded (and maybe initialised) the driver library sees it."""
    code = (
        "import ctypes, sys\n"
        f"lib = ctypes.CDLL({str(libcuda)!r}) if {load} else None\n"
        f"if {init}: lib.cuInit(0)\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from probes import forkserver\n"
        "print(repr(forkserver.cuda_driver_state()))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_a_driver_library_loaded_but_not_initialised_is_safe_to_fork(libcuda: Path) -> None:
    assert state_in_a_process(libcuda, load=False, init=False) == "None"
    assert state_in_a_process(libcuda, load=True, init=False) == "None"


def test_an_initialised_driver_is_unsafe_whatever_torchs_flag_says(libcuda: Path) -> None:
    said = state_in_a_process(libcuda, load=True, init=True)
    assert "libcuda.so.1 answers cuDeviceGetCount with 0 (1 devices)" in said


def test_the_driver_library_is_found_in_the_process_maps() -> None:
    maps = (
        "7f00-7f01 r-xp 00000000 08:01 123   /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15\n"
        "7f02-7f03 rw-p 00000000 00:00 0 \n"
        "7f04-7f05 r-xp 00000000 08:01 124   /usr/lib/libcudart.so.12\n"
    )
    assert forkserver.loaded_libcuda(maps) == "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    assert forkserver.loaded_libcuda(maps.splitlines()[2]) is None  # the runtime is not the driver
    assert forkserver.loaded_libcuda("7f02-7f03 rw-p 00000000 00:00 0\n") is None


def test_the_helpers_imports_use_nvmls_check_so_they_do_not_initialise_the_driver() -> None:
    assert forkserver.PROBE_IMPORT_ENV["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1"


_POOL = """
import json, os, sys
from probes.forkserver import PROBE_IMPORT_ENV, fork_unsafe_reason, native_threads
if sys.argv[1] == "helper":
    os.environ.update({k: v for k, v in PROBE_IMPORT_ENV.items() if k not in os.environ})
import torch
baseline = native_threads()
import scipy.linalg  # its own OpenBLAS, loaded after torch's import (scikit-learn brings it in where installed)
print(json.dumps(fork_unsafe_reason(baseline)))
"""


@pytest.mark.skipif(importlib.util.find_spec("scipy") is None, reason="needs scipy (scikit-learn brings it; nox -s tests installs it)")
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a one-core machine starts no OpenBLAS pool")
def test_a_blas_pool_started_by_a_later_import_does_not_stop_forking_in_the_helper() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    run = [sys.executable, "-c", _POOL]
    plain = json.loads(subprocess.run([*run, "plain"], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout)
    helper = json.loads(subprocess.run([*run, "helper"], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout)
    assert plain is not None and "native thread" in plain  # the mechanism: scipy's pool is more threads than torch's import left
    assert helper is None, helper  # the helper's import environment keeps that pool to one thread
