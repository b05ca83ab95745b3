"""tests/gpu run only where this interpreter's torch is a CUDA build the driver runs: on a GPU host whose
test venv has the CPU torch (`nox -s tests`), every test here is skipped with the reason, never failed.
`nox -s gpu-tests` installs the CUDA torch the host's driver supports and runs them. tests/conftest.py applies it
(a conftest.py here would shadow the root one's `from conftest import ...` for every test collected after it)."""

from __future__ import annotations

import importlib.util

from envmatrix.plan.eligibility import driver_too_old

HOW = "run them with nox -s gpu-tests (it installs the CUDA torch this host's driver supports)"


def cuda_torch_problem(driver: str | None) -> str | None:
    """Why this interpreter cannot run CUDA work with its torch (None: it can). Never initialises CUDA:
    the build's CUDA version (torch.version.cuda) against the driver's minimum (the catalog's)."""
    if importlib.util.find_spec("torch") is None:
        return f"torch is not installed in this interpreter; {HOW}"
    import torch

    cuda = torch.version.cuda
    if cuda is None:
        return f"torch {torch.__version__} here is a CPU build (torch.version.cuda is None); {HOW}"
    if driver is not None and (old := driver_too_old(cuda, driver)):
        return f"torch {torch.__version__}: {old}; {HOW}"
    return None
