"""`envmatrix catalog`: what envmatrix knows about torch, flash-attn, GPUs and CUDA, with sources and dates."""

from __future__ import annotations

import argparse
import json
import sys

from rich.table import Table

from ..facts import catalog
from ..outputs.terminal import Console
from . import options


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("catalog", help="print what envmatrix knows about torch, flash-attn, GPUs and CUDA, with sources and dates")
    options.add_format(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Print the static catalog: what a resolver cannot know, each fact with its source and check date."""
    facts = catalog.as_dict()
    if args.format == "json":
        print(json.dumps(facts, indent=2, ensure_ascii=False))
        return 0
    console = Console(width=max(Console().width, 160) if not sys.stdout.isatty() else None)
    for section, rows in facts.items():
        if not isinstance(rows, list):
            continue
        table = Table(title=section, show_lines=False)
        for col in rows[0]:
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(*(", ".join(map(str, v)) if isinstance(v, list) else str(v) for v in row.values()))
        console.print(table)
    cuda = facts["cuda"]
    assert isinstance(cuda, dict)
    drivers = ", ".join(f"CUDA {k}.x ≥ {v}" for k, v in cuda["min_driver"].items())
    console.print(f"drivers: {drivers} ({cuda['drivers']['source']}, checked {cuda['drivers']['checked']})")
    console.print(f"CUDA 13 builds for {cuda['cuda13_min_sm']} and newer ({cuda['architectures']['source']}, checked {cuda['architectures']['checked']})")
    return 0
