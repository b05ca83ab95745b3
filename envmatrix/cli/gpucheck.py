"""`envmatrix gpu-check`: a self-test of a GPU runner, one line per check."""

from __future__ import annotations

import argparse

from ..host.gpus import detect_gpus
from ..spec.matrix import load
from . import options
from .common import profile_name


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("gpu-check", help="self-test this GPU runner: driver, container runtime, bf16, NCCL, flash-attn, kernels (exit 3 without a GPU)")
    options.FILE.add(p)
    options.PROFILE.add(p, note="gpu on a GPU host, else cpu; its CUDA builds are checked against the driver")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Exit 0 when every check passes or is skipped, 1 when one fails, 3 on a host without a GPU."""
    from ..answers.gpucheck import FAIL, run_checks

    gpus = detect_gpus()
    spec = load(args.file)
    profile = spec.profiles[profile_name(args, spec, gpus)]
    types = ", ".join(f"{t} ×{len(i)}" for t, i in gpus.types().items())
    if gpus.count:
        print(f"gpu-check: {gpus.count} GPUs ({types or ', '.join(gpus.names)}), driver {gpus.driver}, profile '{profile.name}'")
    checks = run_checks(gpus, profile, lambda c: print(c.line, flush=True))
    return 1 if any(c.status == FAIL for c in checks) else 0
