"""`envmatrix publish`: the records as a static site (table, records, index, signed attestations) for any web server."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import InputError
from ..outputs.sinks import terminal
from ..share.keys import load_private_key
from ..share.publish import publish
from . import options
from .common import warn


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("publish", help="write a static site of the records (table, records, index.json, signed attestations) for any web server")
    options.RESULTS.add(p)
    p.add_argument("--out", required=True, metavar="SITE", help="the site's folder (replaced whole when it is an earlier site)")
    p.add_argument(
        "--sign-key", default=None, metavar="KEY", help="ed25519 private key, PEM (openssl genpkey -algorithm ed25519): sign each record's in-toto statement"
    )
    p.add_argument("--site-url", default=None, metavar="URL", help="where the site will be served: the attestations' url fields become absolute")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Write the site; with --sign-key, an attestation per record."""
    folders = [Path(f) for f in options.results_folders(args.results)]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"no such results folder: {', '.join(missing)}; run the matrix first (nox -s matrix) or pass --results DIR")
    if args.site_url is not None and not args.site_url.startswith(("https://", "http://")):
        raise InputError(f"--site-url {args.site_url!r}: give the http(s) URL the site will be served at")
    key = load_private_key(Path(args.sign_key)) if args.sign_key else None
    done = publish(folders, Path(args.out), key, warn, site_url=args.site_url)
    signed = f"signed by {done.keyid}" if done.keyid else "unsigned (no --sign-key)"
    print(terminal(f"site: {done.out}/index.html ({done.records} records, {done.locks} locks, {signed})"))
    if done.keyid:
        print(terminal(f"readers verify with: envmatrix report --results <its URL> --trust {done.out}/key.pub (a copy they got from you, not from the site)"))
    return 0
