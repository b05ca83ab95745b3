"""`envmatrix plan`: the cells of a profile, their status and skip reasons, and the environments to build."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.table import Table

from ..facts import catalog
from ..host.gpus import detect_gpus
from ..outputs.terminal import Console
from ..plan import builds as plan
from ..plan.builds import Build
from ..plan.cells import COVERED, SKIPPED, Cell
from ..plan.install import Sources, install_set
from ..plan.resolve import ResolveOutcome, resolve_cells, unreachable_error
from ..plan.vetrule import vetting_by_gpu
from . import options
from .common import select_cells, take_shard


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("plan", help="list the cells of a profile with their status and skip reasons")
    options.FILE.add(p)
    options.PROFILE.add(p)
    options.add_selection(p)
    options.GPU.add(p, note="every GPU type of the profile")
    options.add_format(p)
    options.SHARD.add(p)
    p.add_argument("--resolve", action="store_true", help="ask uv whether each environment installs, and show the files it would get")
    p.set_defaults(func=handle)


def environment_entry(build: Build, sources: Sources) -> dict[str, object]:
    """One environment to build in `plan --format json`: its build id, what it is built from, the GPU
    types whose cells run in it, how many cells do, its install set and its docker base image."""
    axes = {k: v for k, v in build.env.axes().items() if k != "gpu"}  # where a cell runs, not what is built
    gpus = list(dict.fromkeys(c.env.gpu for c in build.cells))
    wanted = install_set(build.env, sources)
    entry = {"build": build.build_id, "env": {**axes, "packages": dict(build.env.packages)}, "gpus": gpus, "cells": len(build.cells)}
    return {**entry, "install": wanted.as_dict(), "base_image": wanted.base_image, "leads": leads(build)}


def leads(build: Build) -> dict[str, str]:
    """Per GPU type its cells run on, what the catalog expects may fail there (a lead the run confirms or not)."""
    found = {gpu: catalog.h20_sigfpe_lead(build.env.cuda, gpu) for gpu in dict.fromkeys(c.env.gpu for c in build.cells)}
    return {gpu: text for gpu, text in found.items() if text}


def handle(args: argparse.Namespace) -> int:
    """Print the cells of a profile and the environments they need."""
    gpus = detect_gpus()  # this host's facts apply to the plan of its own GPU types, not to a plan for another host
    here = gpus if gpus.count and (args.gpu is None or args.gpu in gpus.types()) else None
    spec, profile, cells = select_cells(args, gpu=args.gpu, host=here)
    cells = take_shard(cells, args.shard)
    sources = Sources.of(spec.profiles[profile], Path(args.file).parent)
    outcome = resolve_cells(cells, sources) if args.resolve else None
    cells = outcome.cells if outcome else cells
    builds = plan.builds(cells)
    if args.format == "json":
        doc = {
            "cells": [c.as_dict() for c in cells],
            "environments": [environment_entry(b, sources) for b in builds],
            "resolutions": {k: v.as_dict() for k, v in outcome.resolutions.items()} if outcome else None,
            "unreachable": outcome.unreachable if outcome else {},
            "vetting": vetting_by_gpu(cells),
        }
        print(json.dumps(doc, indent=2))
        if outcome and outcome.unreachable:
            raise unreachable_error(outcome)
        return 0
    console = Console(width=max(Console().width, 160) if not sys.stdout.isatty() else None)
    part = f", shard {args.shard[0]}/{args.shard[1]}" if args.shard else ""
    table = Table(title=f"profile {profile}{part}: {len(cells)} cells", show_lines=False)
    for col in ("id", "cuda", "torch", "transformers", "flash_attn", "gpu", "python", "scenario", "status", "reason", "vetted by"):
        table.add_column(col, overflow="fold")
    for c in cells:
        e = c.env
        status = f"[yellow]{c.status}[/]" if c.status == SKIPPED else f"[cyan]{c.status}[/]" if c.status == COVERED else c.status
        vet = c.vetted_by.split("/")[-1] + ("" if c.vetted_by.startswith(e.id + "/") else f" ({c.vetted_by.split('/')[0]})") if c.vetted_by else ""
        table.add_row(c.id, e.cuda, e.torch, e.transformers, e.flash_attn, e.gpu, e.python, c.scenario.name, status, c.reason, vet or c.unvetted)
    console.print(table)
    _print_vetting(console, cells)
    _print_leads(console, builds)
    tally = plan.counts(cells)
    console.print(
        f"{tally.get('planned', 0)} planned, {tally.get(COVERED, 0)} covered (by a planned cell: see reason), {tally.get('skipped', 0)} skipped; "
        f"{len(builds)} environments to build (images or venvs)"
    )
    if outcome:
        _print_resolutions(console, outcome)
    return 0


def _print_vetting(console: Console, cells: list[Cell]) -> None:
    """Per GPU type: the environments with a healthy planned cell, how many a planned control can vet, and the
    ones it cannot with why (an exclude rule or a missing control never leaves one unvettable silently)."""
    for gpu, row in vetting_by_gpu(cells).items():
        style = "red" if row["unvettable"] else "green"
        console.print(
            f"[{style}]{gpu}: {row['vettable']} of {row['environments']} environments with a healthy planned cell can be vetted"
            f" ({row['controls']} controls planned)[/]",
            highlight=False,
        )
        for env_id, why in row["unvettable"].items():
            console.print(f"  [red]cannot be vetted[/]: {env_id}: {why}", soft_wrap=True, highlight=False)


def _print_leads(console: Console, builds: list[Build]) -> None:
    """What the catalog expects may fail where (the seeds' stacks), for the run to confirm or not."""
    for build in builds:
        for gpu, text in leads(build).items():
            console.print(f"[yellow]lead[/] {build.build_id} on {gpu}: {text}", soft_wrap=True, highlight=False)


def _print_resolutions(console: Console, outcome: ResolveOutcome) -> None:
    """The files each environment resolves to (name, version, URL, sha256), then what went unchecked."""
    for build_id, res in sorted(outcome.resolutions.items()):
        head = "resolves" if res.ok else "does not resolve"
        console.print(f"[bold]{build_id}[/] {head}{' (cached)' if res.cached else ''}" + ("" if res.ok else f": {res.reason}"))
        for f in res.files:
            console.print(f"  {f.name}=={f.version}  {f.url}  sha256:{f.sha256[:16]}…", soft_wrap=True, highlight=False)
    if outcome.unreachable:
        raise unreachable_error(outcome)
