"""`envmatrix images`: the probe images envmatrix built on this engine, and the pruning of superseded ones.

Lists by default; `--prune` says what it would remove and removes nothing unless `--yes` is given too.
"""

from __future__ import annotations

import argparse
import json
import sys

from rich.markup import escape
from rich.table import Table

from ..backends import images
from ..backends.docker import connect
from ..errors import printable
from ..host.diskspace import gib
from ..outputs.terminal import Console
from . import options


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("images", help="list the probe images envmatrix built here; --prune removes the superseded ones")
    p.add_argument("--prune", action="store_true", help="remove superseded images (older images of an environment with a newer one); a dry run unless --yes")
    p.add_argument("--yes", action="store_true", help="with --prune: really remove them")
    options.add_format(p)
    p.set_defaults(func=handle)


def _shown(text: str | None) -> str:
    """An image's tag or label for the terminal: anyone may tag an image into the repository with any labels, so
    control characters are escaped and rich's markup is not read."""
    return escape(printable(text)) if text else "?"


def handle(args: argparse.Namespace) -> int:
    client = connect()
    if args.prune:
        done = images.prune(client, dry_run=not args.yes)
        if args.format == "json":
            print(
                json.dumps(
                    {
                        "dry_run": not args.yes,
                        "removed": [i.as_dict() for i in done.removed],
                        "kept_in_use": [i.as_dict() for i in done.kept_in_use],
                        "failed": [{**i.as_dict(), "error": e} for i, e in done.failed],
                        "freed": done.freed,
                    },
                    indent=2,
                )
            )
            return 1 if done.failed else 0
        verb = "removed" if args.yes else "would remove (dry run: add --yes to remove)"
        print(f"{verb}: {len(done.removed)} superseded images, up to {gib(done.freed)} (layers they share with kept images stay)")
        for image in done.removed:
            print(f"  {printable(image.tag)}  {printable(image.build_id or '?')}  {printable(image.created[:19])}  {gib(image.size)}")
        for image in done.kept_in_use:
            print(f"  kept {printable(image.tag)} ({printable(image.build_id or '?')}): a container uses it")
        for image, error in done.failed:
            print(f"  failed {printable(image.tag)}: {printable(error)}")
        return 1 if done.failed else 0
    found = images.probe_images(client)
    if args.format == "json":
        print(json.dumps([i.as_dict() for i in found], indent=2))
        return 0
    table = Table(title=f"{images.REPOSITORY} images on this engine")
    for col in ("tag", "environment", "recipe", "created", "size", "state"):
        table.add_column(col, overflow="fold")
    for i in found:
        state = i.state + (" (in use)" if i.in_use else "")
        table.add_row(_shown(i.tag), _shown(i.build_id), _shown(i.recipe), _shown(i.created[:19]), gib(i.size), state)
    console = Console(width=max(Console().width, 160) if not sys.stdout.isatty() else None)
    console.print(table)
    stale = [i for i in found if i.state == "superseded"]
    console.print(f"{len(found)} images, {len(stale)} superseded ({gib(sum(i.size for i in stale))}): envmatrix images --prune shows what it removes")
    return 0
