"""Which CUDA build of torch this host's driver runs, as pip arguments (`nox -s gpu-tests` installs it).

The CUDA builds a torch release publishes are the catalog's (facts/catalog.py TORCH); the lowest driver each
CUDA major runs on is plan/eligibility.driver_too_old's. The newest build the driver accepts is chosen, so
tests/gpu meet the host's GPU with the torch a team would install there.
"""

from __future__ import annotations

import sys

from packaging.version import Version

from ..facts import catalog
from ..plan.eligibility import driver_too_old
from .gpus import detect_gpus
from .pipconfig import torch_index_url


class NoCudaTorch(Exception):
    """No CUDA build of this torch runs here: the message says why and what to do."""


def cuda_torch_build(version: str, driver: str | None) -> str:
    """The newest CUDA version this torch release publishes whose build the driver runs (`13.0`)."""
    builds = catalog.TORCH.get(catalog.minor(version))
    if builds is None:
        raise NoCudaTorch(f"torch {version}: not in the catalog's build matrix (facts/catalog.py TORCH); pick a release it knows")
    if driver is None:
        raise NoCudaTorch("no NVIDIA GPU or driver here (nvidia-smi lists none): tests/gpu need a GPU host; nox -s tests skips them here")
    fitting = [cuda for cuda in builds.cuda if driver_too_old(cuda, driver) is None]
    if not fitting:
        raise NoCudaTorch(f"torch {version}: every CUDA build ({', '.join(builds.cuda)}) needs a newer driver than this host's {driver}; update the driver")
    return max(fitting, key=Version)


def cuda_torch_install_args(version: str, driver: str | None) -> list[str]:
    """`torch==VERSION+cuXYZ` and PyTorch's index for that build (or ENVMATRIX_TORCH_INDEX's mirror of it)."""
    cuda = cuda_torch_build(version, driver)
    tag = "cu" + cuda.replace(".", "")
    return [f"torch=={version}+{tag}", "--extra-index-url", torch_index_url(tag)]


def main(argv: list[str] | None = None) -> int:
    """`python -m envmatrix.host.cudatorch VERSION`: the install arguments, one a line; exit 3 without a GPU that can run one."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m envmatrix.host.cudatorch TORCH_VERSION", file=sys.stderr)
        return 2
    try:
        print("\n".join(cuda_torch_install_args(args[0], detect_gpus().driver)))
    except NoCudaTorch as exc:
        print(f"envmatrix: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
