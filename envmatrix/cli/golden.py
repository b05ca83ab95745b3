"""`envmatrix golden`: compare a run's records with the golden file of every cell's expected outcome (or write it)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..errors import InputError
from ..outputs import golden
from ..records.record import load_records
from . import options
from .common import warn

DEFAULT = "tests/data/golden/cpu-outcomes.json"


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("golden", help="compare a run's outcomes, cell by cell, with the golden file (nox -s golden)")
    options.RESULTS.add(p)
    p.add_argument("--golden", default=DEFAULT, help=f"the golden file (default {DEFAULT})")
    options.PROFILE.add(p, default="cpu", note="cpu; written into the file with --update")
    p.add_argument("--update", action="store_true", help="write the golden file from the records instead (after reading every difference)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Exit 0 when every cell's outcome is the golden file's, 1 (each difference listed) when not."""
    folders = [Path(f) for f in options.results_folders(args.results)]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"no such results folder: {', '.join(missing)}; run the profile first (nox -s golden runs it)")
    records = load_records(*folders, warn=warn)
    console = Console()
    if args.update:
        cells = golden.write(Path(args.golden), records, args.profile)
        console.print(f"{escape(args.golden)}: {len(cells)} cells written")
        return 0
    diffs = golden.differences(records, golden.read(Path(args.golden)))
    for line in diffs:
        console.print(f"[red]differs[/] {escape(line)}")
    console.print(f"{len(records)} cells compared with {escape(args.golden)}: " + (f"{len(diffs)} differ" if diffs else "every outcome as expected"))
    return 1 if diffs else 0
