"""`envmatrix check`: a stack (requirements.txt, pylock.toml, uv.lock, an interpreter) answered from kept records and the
fact tables, before anyone runs it: known bad, vetted, declared incompatible, or never run (and what is nearest)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..errors import EnvmatrixError, InputError
from . import options
from .common import warn


class NoRecords(EnvmatrixError):
    """Nothing to answer from: no record (on that GPU type) in the sources given."""

    exit_code = 3


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("check", help="answer a stack from kept records, before a run: known bad, vetted, declared incompatible, never run")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("file", nargs="?", default=None, metavar="FILE", help="a requirements file, a PEP 751 pylock.toml or a uv.lock")
    source.add_argument("--current", nargs="?", const="", metavar="PYTHON", help="the distributions installed in this interpreter, or in PYTHON")
    options.GPU.add(p, note="the records' only GPU type, else this host's")
    options.RESULTS.add(p)
    options.TRUST.add(p)
    options.add_format(p, extra={"sarif": "SARIF 2.1.0, for code scanning to annotate the line that pins a bad release"})
    p.add_argument("--output", metavar="FILE", type=Path, help="write the answer to FILE instead of standard output (a SARIF upload)")
    p.set_defaults(func=handle)


def _gpu(args: argparse.Namespace, gpus_in_records: set[str]) -> str:
    """--gpu, else the records' only GPU type, else this host's."""
    if args.gpu:
        return str(args.gpu)
    if len(gpus_in_records) == 1:
        return next(iter(gpus_in_records))
    from ..host.gpus import detect_gpus

    found = detect_gpus()
    if found.matrix_name is None:
        raise InputError(f"the records hold GPU types {', '.join(sorted(gpus_in_records))}; name the one to check on with --gpu")
    return found.matrix_name


def handle(args: argparse.Namespace) -> int:
    """Exit 0 when nothing known is bad, 1 when something is, 2 bad input, 3 no records to answer from."""
    from ..answers.check import answer
    from ..outputs import check_report
    from ..outputs.writer import file_target, write_file
    from ..share.keys import load_trusted
    from ..share.merge import gather
    from ..stack import read_stack
    from ..stack.interpreter import read_interpreter

    if args.output:
        file_target(args.output, "--output")  # a folder or a device is refused before anything is read
    stack = read_stack(Path(args.file)) if args.file is not None else read_interpreter(args.current or None)
    merged = gather(options.results_folders(args.results), load_trusted(args.trust), warn)
    records = merged.records
    for row in merged.apart:
        warn(f"not counted: {row.record.id}: {row.provenance.text()}")
    if not records:
        raise NoRecords(
            f"no records in {', '.join(options.results_folders(args.results))}"
            + (" verified against a trusted signer" if args.trust else "")
            + "; run the matrix (envmatrix run) or pass --results DIR or a site's URL"
        )
    gpu = _gpu(args, {r.cell.gpu for r in records})
    if not any(r.cell.gpu == gpu for r in records):
        raise NoRecords(f"no records on {gpu} (the records hold {', '.join(sorted({r.cell.gpu for r in records}))}); pass --gpu, or records of {gpu}")
    driver = None
    if args.file is None:  # an interpreter on this host runs on this host's driver
        from ..host.gpus import detect_gpus

        driver = detect_gpus().driver
    found = answer(stack, records, gpu, merged.provenance(), f"{sys.version_info.major}.{sys.version_info.minor}", driver=driver)
    if merged.apart:  # said in the answer too: a CI log shows why a record someone published did not count
        found.notes.insert(0, f"{len(merged.apart)} record(s) not counted: not verified against a key you trust (--trust)")
    if args.format == "sarif":
        out = json.dumps(check_report.sarif(found), indent=2) + "\n"
    elif args.format == "json":
        out = json.dumps(found.as_dict(), indent=2) + "\n"
    else:
        out = check_report.text(found)
    if args.output:
        write_file(args.output, out, "--output")
    else:
        sys.stdout.write(out)
    if merged.problems:
        raise InputError(merged.trouble("the answer stands on the records that could be read"))
    return found.exit_code()
