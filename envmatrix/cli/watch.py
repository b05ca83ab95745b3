"""`envmatrix watch`: try each axis's new releases against the profile's baseline (the team's stack), bisect what
breaks, say what to upgrade first and which lock to stay on."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import InputError
from ..host.gpus import detect_gpus
from ..outputs.terminal import Console
from ..outputs.writer import file_target, write_file, write_files
from ..spec.matrix import load
from . import options
from .common import gpu_ids, gpu_type

#: The profile `envmatrix init` writes by default.
DEFAULT_PROFILE = "stack"


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("watch", help="try new releases against your stack's baseline, bisect what breaks, say what to move first (real runs)")
    options.FILE.add(p)
    options.PROFILE.add(p, default=DEFAULT_PROFILE, note=f"{DEFAULT_PROFILE}, the one envmatrix init writes")
    options.GPU.add(p)
    options.BACKEND.add(p, default="venv", note="venv")
    options.TIMEOUT.add(p)
    options.REPORTS.add(p)
    options.VENVS.add(p)
    p.add_argument("--summary", metavar="FILE.md", help="write the summary as Markdown (a job summary, an issue body)")
    p.add_argument(
        "--propose",
        metavar="FILE",
        help="your requirements.txt, pylock.toml or uv.lock: write it moved to the newest releases that train to REPORTS/proposed/ (and a .diff)",
    )
    options.add_format(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Exit 0 when nothing broke, 1 when a newer release breaks a scenario, 2 bad input, 3 no index or environment."""
    from ..answers.watch_propose import proposal as make_proposal
    from ..answers.watch_propose import proposed_path
    from ..answers.watch_run import WatchRequest, run_watch
    from ..answers.watch_summary import as_json, markdown
    from ..backends.registry import choose
    from ..stack import read_stack

    if args.summary:
        file_target(Path(args.summary), "--summary")  # refused before the watch runs, not after
    spec = load(args.file)
    if args.profile not in spec.profiles:
        raise InputError(f"{args.file}: no profile '{args.profile}' (it has {', '.join(spec.profiles)}); write one with envmatrix init, or pass --profile")
    gpus = detect_gpus()
    gpu = gpu_type(args, gpus)
    name, _ = choose(args.backend, gpus.count)
    as_json_out = args.format == "json"
    console = Console(stderr=as_json_out)
    request = WatchRequest(
        profile=args.profile, gpu=gpu, backend=name, reports=Path(args.reports), venvs=Path(args.venvs), base=Path(args.file).parent,
        timeout=args.timeout, gpu_ids=tuple(gpu_ids(gpu, gpus)),
    )  # fmt: skip
    if args.propose:
        read_stack(Path(args.propose))  # a file the readers refuse is bad input before anything runs
        file_target(proposed_path(Path(args.propose), Path(args.reports)), "--propose")
    watch = run_watch(spec, request, console)
    text = markdown(watch, reports=args.reports)
    proposal = make_proposal(Path(args.propose), watch, Path(args.reports)) if args.propose else None
    if proposal is not None:
        text += "\n" + proposal.text
    if as_json_out:
        found = as_json(watch, reports=args.reports)
        if proposal is not None:
            found["proposal"] = {
                "file": args.propose,
                "proposed": str(proposal.proposed) if proposal.proposed else None,
                "moved": proposal.moved,
                "diff": proposal.diff,
            }
        print(json.dumps(found, indent=2, default=str))
    else:
        sys.stdout.write(text)
    sys.stdout.flush()  # the answer is out before the file is written: a failed write loses only the file
    if args.summary:
        write_file(Path(args.summary), text, "--summary")
    if proposal is not None and proposal.files:
        write_files([(path, data) for path, data in proposal.files], "--propose")
    return watch.exit_code()
