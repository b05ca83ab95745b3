"""`envmatrix classify`: which known failure a training log shows, with evidence and remedy."""

from __future__ import annotations

import argparse
import json
import sys
from typing import BinaryIO, cast

from probes import untrusted

from ..errors import InputError, printable
from ..verdict.classify import RunFacts, classify
from ..verdict.evidence import facts
from ..verdict.logscan import scan_stream
from . import options
from .common import warn

exit_code = options.bounded_int("an exit status (0 to 255, or -N for signal N)", -255, 255, "1, 136 or -8")


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("classify", help="tell which known failure a training log shows, with evidence and remedy")
    p.add_argument("log", help="the log file, or - for standard input")
    p.add_argument("--exit-code", type=exit_code, default=None, help="the run's exit status (-N or 128+N for signal N)")
    options.add_format(p, json_alias=True)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Classify a user's own training log: class, evidence line, remedy. Exit 0 whatever the class."""
    if args.log == "-":
        if sys.stdin is None:
            raise InputError("standard input is closed; pipe a log in (… | envmatrix classify -) or pass the log's path")
        try:
            stream = untrusted.Bounded(sys.stdin.buffer, untrusted.LOG.max_bytes)
            scan = scan_stream(cast(BinaryIO, stream))  # it reads like one
        except OSError as exc:
            raise InputError(f"standard input: cannot read the log: {exc.strerror or exc}; pipe a log in or pass the log's path") from None
    else:
        try:
            stream, note = untrusted.open_stream(args.log, untrusted.LOG)  # a FIFO or /dev/zero ends at the bound
            if note:
                warn(note)
            with stream:
                scan = scan_stream(cast(BinaryIO, stream))
        except untrusted.Refused as exc:
            raise InputError(str(exc)) from None
        except OSError as exc:
            raise InputError(f"{args.log}: cannot read the log: {exc.strerror or exc}; pass a readable file or - for standard input") from None
    if stream.cut:
        first = untrusted.size_text(untrusted.LOG.max_bytes)
        warn(f"{'standard input' if args.log == '-' else args.log}: classified the first {first} only; {untrusted.LOG.hint}")
    verdict = classify(RunFacts(scan=scan, exit_code=args.exit_code))
    if args.format == "json":
        print(json.dumps({**verdict.as_dict(), "facts": facts(scan), "lines": scan.lines, "bytes": scan.size}, indent=2))
    else:
        print(f"class:    {verdict.outcome}")
        print(f"evidence: {printable(verdict.evidence)}")  # a line of the user's log
        print(f"remedy:   {printable(verdict.remedy)}")
        if verdict.also:
            print(f"also:     {', '.join(verdict.also)}")
    return 0
