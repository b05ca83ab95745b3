"""`envmatrix bisect`: the first release of an axis where a scenario's outcome changes, by real runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..backends.registry import choose
from ..host.gpus import detect_gpus
from ..outputs.terminal import Console
from ..spec.matrix import load
from . import options
from .common import gpu_ids, gpu_type, profile_name


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("bisect", help="find the first release of an axis where a scenario stops training (then where the failure changes), by real runs")
    p.add_argument("--axis", required=True, help="torch, transformers, flash_attn or a package axis (trl, peft, ...)")
    p.add_argument("--good", required=True, metavar="V1", help="a release where the scenario trains (ok)")
    p.add_argument("--bad", required=True, metavar="V2", help="a release where it fails")
    p.add_argument("--scenario", required=True, help="scenario name in the matrix file")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        type=held_value,
        metavar="AXIS=VALUE",
        help="hold another axis or package at a value (default: the profile's first; a package the scenario needs is never none); repeatable",
    )
    options.FILE.add(p)
    options.PROFILE.add(p, note="gpu on a GPU host, else cpu; it gives the other axes")
    options.GPU.add(p)
    options.BACKEND.add(p, default="venv", note="venv")
    p.add_argument("--pre", action="store_true", help="include pre-releases")
    p.add_argument(
        "--drift",
        action="store_true",
        help="bisect where the numbers leave the good release's (a cell that trains but drifts counts as changed; docs/drift.md)",
    )
    options.TIMEOUT.add(p)
    options.REPORTS.add(p)
    options.VENVS.add(p)
    p.set_defaults(func=handle)


def held_value(text: str) -> tuple[str, str]:
    """`--set AXIS=VALUE`: the pair; its names and values are checked against the profile when it is known."""
    axis, sep, value = text.partition("=")
    if not sep or not axis or not value:
        raise argparse.ArgumentTypeError(f"{text!r} is not AXIS=VALUE; write e.g. trl=0.19.1 or torch=2.13.0")
    return axis, value


def handle(args: argparse.Namespace) -> int:
    """Bisect an axis's releases to the first one whose outcome is not the good side's, whatever the failure,
    then where the kind of failure changes (real runs). Exit 0 when found, 1 when the boundary hides behind
    releases that cannot be installed, 2 when an endpoint does not show the outcome claimed."""
    from ..answers.bisect import ENDPOINT, FOUND
    from ..answers.bisect_run import BisectRequest, print_bisect, run_bisect

    spec = load(args.file)
    gpus = detect_gpus()
    profile = profile_name(args, spec, gpus)
    gpu = gpu_type(args, gpus)
    name, _ = choose(args.backend, gpus.count)
    request = BisectRequest(
        axis=args.axis, good=args.good, bad=args.bad, scenario=args.scenario, profile=profile, gpu=gpu, backend=name,
        reports=Path(args.reports), venvs=Path(args.venvs), base=Path(args.file).parent, timeout=args.timeout, pre=args.pre, gpu_ids=tuple(gpu_ids(gpu, gpus)),
        held=dict(args.set), drift=args.drift,
    )  # fmt: skip
    console = Console()
    run = run_bisect(spec, request, console)
    print_bisect(console, request, run)
    return 0 if run.result.status == FOUND else 2 if run.result.status == ENDPOINT else 1
