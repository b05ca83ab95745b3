"""`envmatrix report`: matrix.html, results.csv and results.json from results folders and published sites."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from ..errors import InputError
from ..outputs.drift import report as drift_report
from ..outputs.findings import find
from ..outputs.report import report_paths, write_merged
from ..outputs.sinks import terminal
from ..outputs.summary import print_drift, print_findings, print_vetting
from ..outputs.terminal import Console
from ..outputs.writer import check_files
from ..records.provenance import Merged, from_folders
from ..share.keys import load_trusted
from ..share.merge import gather
from . import options
from .common import warn


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("report", help="render matrix.html, results.csv and results.json from results folders and published sites")
    options.RESULTS.add(p)
    options.TRUST.add(p)
    p.add_argument("--out", default="reports", help="output folder (default reports)")
    p.add_argument("--since", action="append", default=None, metavar="OLD_RESULTS", help="an earlier run's results folder: changed cells lead the findings")
    p.set_defaults(func=handle)


def provenance_line(merged: Merged) -> str:
    """`provenance: 4 verified; shown apart: 2 (signer not trusted 2)`."""
    counted, apart = merged.counted, merged.apart
    verified = sum(r.provenance.verified for r in counted)
    line = f"provenance: {verified} of {len(counted)} counted records verified against a trusted signer"
    if apart:
        why = Counter(r.provenance.standing or r.provenance.note or "not verified" for r in apart)
        line += f"; shown apart, never vetted: {len(apart)} ({', '.join(f'{k} {n}' for k, n in sorted(why.items()))})"
    return line


def handle(args: argparse.Namespace) -> int:
    """Render the report from folders and sites; a site that broke its bounds is named, the rest is kept, and the status is 2."""
    since = [Path(f) for f in args.since] if args.since else None
    missing = [str(f) for f in since or [] if not f.is_dir()]
    if missing:
        raise InputError(f"--since {', '.join(missing)}: no such results folder; pass an earlier run's results folder (e.g. a copy of reports/results)")
    merged = gather(options.results_folders(args.results), load_trusted(args.trust), warn)
    previous = from_folders(since, warn).records if since else None
    out = Path(args.out)
    check_files(list(report_paths(out).values()), "a report file")  # refused before anything is printed
    console = Console()
    records = merged.records
    print_findings(console, find(records, previous or ()))
    print_drift(console, drift_report(records))
    print_vetting(console, records)
    print(terminal(provenance_line(merged)), flush=True)  # the answer is out before the files are written
    outputs = write_merged(merged, out, previous)
    print(terminal(f"report: {outputs['html']} ({outputs['csv'].name}, {outputs['json'].name}, {outputs['vetted'].name})"))
    if merged.problems:
        raise InputError(merged.trouble(f"the report holds the {len(records) + len(merged.apart)} records that could be read"))
    return 0
