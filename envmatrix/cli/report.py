"""`envmatrix report`: matrix.html, results.csv and results.json from one or more results folders."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError
from ..outputs.findings import find
from ..outputs.report import write_report
from ..outputs.summary import print_findings, print_vetting
from ..outputs.terminal import Console
from ..records.record import load_records
from . import options
from .common import warn


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("report", help="render matrix.html, results.csv and results.json from results folders")
    options.RESULTS.add(p)
    p.add_argument("--out", default="reports", help="output folder (default reports)")
    p.add_argument("--since", action="append", default=None, metavar="OLD_RESULTS", help="an earlier run's results folder: changed cells lead the findings")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Render matrix.html, results.csv and results.json from one or more results folders."""
    folders = [Path(f) for f in options.results_folders(args.results)]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"no such results folder: {', '.join(missing)}; run the matrix first (nox -s matrix) or pass --results DIR")
    since = [Path(f) for f in args.since] if args.since else None
    missing = [str(f) for f in since or [] if not f.is_dir()]
    if missing:
        raise InputError(f"--since {', '.join(missing)}: no such results folder; pass an earlier run's results folder (e.g. a copy of reports/results)")
    outputs = write_report(folders, Path(args.out), warn, since=since)
    console = Console()
    records = load_records(*folders)
    print_findings(console, find(records, load_records(*since) if since else ()))
    print_vetting(console, records)
    print(f"report: {outputs['html']} ({outputs['csv'].name}, {outputs['json'].name}, {outputs['vetted'].name})")
    return 0
