"""`envmatrix lock`: a pinned, hashed lockfile for a vetted environment."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import InputError
from ..outputs.lock import write_lock
from ..outputs.require import parse as parse_requires
from ..outputs.sinks import terminal
from ..share.keys import load_trusted
from ..share.merge import gather
from . import options
from .common import warn


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("lock", help="write a pinned, hashed lockfile for a vetted environment")
    p.add_argument("env", nargs="?", default=None, help="environment id, e.g. cpu-torch2.13.0-tf5.23.0-fanone-cpu-py3.11")
    p.add_argument("--best", default=None, metavar="GPU", help="lock the newest environment vetted on this GPU type for the workload")
    p.add_argument(
        "--scenario",
        action="append",
        default=[],
        help="with --best: the workload, repeatable (default: every healthy scenario that ran on that GPU and does not fail everywhere)",
    )
    p.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="SPEC",
        help="with --best: a requirement the environment must satisfy, as pip writes it ('vllm>=0.17'); repeatable",
    )
    options.RESULTS.add(p)
    options.TRUST.add(p)
    p.add_argument("--out", default="reports", help="output folder; the lock goes to OUT/locks/<env>/")
    p.add_argument(
        "--trust-record-indexes", action="store_true", help="look files up on the package sources a record names even where they differ from your pip settings"
    )
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Write a lockfile for a vetted environment (or the newest vetted one for a GPU type); with --trust,
    standing only on records verified against a trusted signer."""
    if not args.env and not args.best:
        raise InputError("name an environment id (see the report's vetted list) or --best GPU")
    if args.require and not args.best:
        raise InputError("--require narrows --best GPU; an environment named by its id is locked as it is")
    if args.scenario and not args.best:
        raise InputError("--scenario names the workload for --best GPU; with an environment id, the lock says what it is vetted for")
    merged = gather(options.results_folders(args.results), load_trusted(args.trust), warn)
    if merged.problems:
        raise InputError(merged.trouble("a lock stands only on sources read whole; nothing was written"))
    folder = write_lock(
        merged.records,
        Path(args.out),
        env_id=args.env,
        best_gpu=args.best,
        scenarios=args.scenario,
        trust_record_indexes=args.trust_record_indexes,
        provenance=merged.provenance(),
        requires=parse_requires(args.require),
    )
    vetted = json.loads((folder / "sources.json").read_text())["environment"]
    if args.require:
        print(terminal(f"{vetted['env']} satisfies {', '.join(args.require)}"))
    print(terminal(f"{vetted['env']}: vetted for {', '.join(vetted['scenarios'])}; controls {vetted['controls']}/{vetted['controls_ran']} reproduced"))
    if merged.trusted:
        print(
            terminal(
                f"stands on records verified against {len(merged.trusted)} trusted signer(s); attestation digests in {folder}/pylock.toml [tool.envmatrix]"
            )
        )
    print(terminal(f"lock: {folder}/requirements.lock, {folder}/pylock.toml, {folder}/sources.json"))
    return 0
