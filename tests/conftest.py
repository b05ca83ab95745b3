"""Shared fixtures: a minimal valid matrix to mutate, and where the real logs are."""

from __future__ import annotations

import copy
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
REAL_LOGS = ROOT.parent / "shared" / "real-logs"

BASE: dict[str, Any] = {
    "version": 1,
    "profiles": {
        "gpu": {
            "cuda": ["12.4"],
            "torch": ["2.5.1", "2.6.0"],
            "transformers": ["4.51.3"],
            "flash_attn": ["none", "2.7.4.post1"],
            "gpu": ["A100", "H20"],
            "python": ["3.11"],
        },
        "cpu": {
            "cuda": ["none"],
            "torch": ["2.13.0"],
            "transformers": ["4.51.3", "4.57.6"],
            "flash_attn": ["none"],
            "gpu": ["cpu"],
            "python": ["3.11"],
        },
    },
    "scenarios": {
        "fp32-sdpa": {"dtype": "fp32", "attn": "sdpa"},
        "bf16-fa2": {"dtype": "bf16", "attn": "flash_attention_2"},
        "ctl-zero-grad": {"temperature": 0.01, "top_p": 0.001, "expect": "zero_grad"},
    },
}


def installed(name: str) -> str:
    """The installed release of a distribution, without a local tag (2.13.0+cpu → 2.13.0)."""
    from importlib.metadata import version

    return version(name).split("+")[0]


def write_host_matrix(tmp: Path, scenarios: dict[str, dict[str, Any]], transformers: list[str] | None = None) -> Path:
    """A small cpu matrix whose axes are this interpreter's stack (what the host backend runs)."""
    import sys

    axes = {
        "cuda": ["none"],
        "torch": [installed("torch")],
        "transformers": transformers or [installed("transformers")],
        "flash_attn": ["none"],
        "gpu": ["cpu"],
    }
    data = {"version": 1, "profiles": {"cpu": {**axes, "python": [f"{sys.version_info.major}.{sys.version_info.minor}"]}}, "scenarios": scenarios}
    path = tmp / "matrix.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def ctrl_c_able() -> None:
    """preexec_fn for a child a test will interrupt: SIGINT back to its default. A shell's background job
    (CI started with `&`, nohup) inherits SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(predicate: Callable[[], object], timeout: float = 120) -> None:
    """Poll until `predicate()` is true; fail the test when it is not within `timeout` seconds."""
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def problems(path: Path) -> str:
    """The messages of the SpecError that loading `path` must raise (exit status 2)."""
    from envmatrix.errors import SpecError
    from envmatrix.spec.matrix import load

    with pytest.raises(SpecError) as info:
        load(path)
    assert info.value.exit_code == 2
    return str(info.value)


@pytest.fixture
def matrix(tmp_path: Path) -> Callable[..., Path]:
    """Write BASE (or BASE changed by `edit`, or raw text) to a file and return its path."""

    def make(edit: Callable[[dict[str, Any]], None] | None = None, text: str | None = None) -> Path:
        path = tmp_path / "matrix.yaml"
        if text is None:
            data = copy.deepcopy(BASE)
            if edit:
                edit(data)
            text = yaml.safe_dump(data, sort_keys=False)
        path.write_text(text)
        return path

    return make


@pytest.fixture
def docker_client() -> Any:
    """A real Docker engine with the Debian base image (`.ci/run` makes both: dockerfiles/debian-base.sh), asked at run
    time, never while collecting; the test skips, saying why, without them. One owner for the integration tests' engine."""
    from envmatrix.backends.docker import connect
    from envmatrix.facts.catalog import CPU_BASE_IMAGE

    try:
        found = connect()
        found.images.get(CPU_BASE_IMAGE)
    except Exception as exc:
        pytest.skip(f"needs a Docker engine and the {CPU_BASE_IMAGE} image (.ci/run makes both; bash dockerfiles/debian-base.sh): {exc}")
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """tests/gpu on a GPU host whose torch cannot run there (the CPU torch of `nox -s tests`): skipped with the reason,
    never failed. A GPU-less host is left to the modules' own marks (they say there is no GPU), which pytest reads first."""
    gpu_dir = Path(__file__).resolve().parent / "gpu"
    gpu_items = [item for item in items if gpu_dir in Path(str(item.path)).resolve().parents]
    if not gpu_items:
        return
    import importlib.util

    from envmatrix.host.gpus import detect_gpus

    spec = importlib.util.spec_from_file_location("envmatrix_tests_cuda_torch", gpu_dir / "cuda_torch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    why = module.cuda_torch_problem(detect_gpus().driver)
    for item in gpu_items if why else ():
        item.add_marker(pytest.mark.skip(reason=why))
