"""`envmatrix doctor`: is the environment in hand a good one? Probe it and compare it with vetted environments."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..host.gpus import detect_gpus
from ..outputs.terminal import Console
from ..records.outcomes import Outcome
from ..records.record import load_records
from ..spec.matrix import load
from . import options
from .common import profile_name, warn

if TYPE_CHECKING:
    from ..answers.doctor import Diagnosis, Nearest


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("doctor", help="is the environment in hand a good one? probe it and compare with vetted environments")
    options.FILE.add(p)
    options.PROFILE.add(p)
    p.add_argument("--scenario", action="append", default=[], help="run only this scenario; repeatable (default: the profile's that fit)")
    options.RESULTS.add(p, note="none, so nothing to compare with")
    options.REPORTS.add(p, default=None, note="a new temporary folder")
    options.TIMEOUT.add(p)
    options.add_format(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Probe this interpreter with the scenarios the hardware can run; compare it with the vetted
    environments of the records given. Exit 0 when every healthy scenario is ok, 1 when one is not."""
    from ..answers.doctor import cells_for, diagnose, installed_environment, installed_pins, nearest_vetted, print_diagnosis

    spec = load(args.file)
    gpus = detect_gpus()
    profile = profile_name(args, spec, gpus)
    if gpus.matrix_name is None:
        raise InputError(f"this host's GPU ({gpus.names[0]}) is not in the catalog; doctor cannot tell which scenarios it can run")
    folders = [Path(f) for f in args.results or []]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"--results {', '.join(missing)}: no such results folder")
    env = installed_environment(gpus, spec.profiles[profile].packages)
    cells = cells_for(spec, profile, env, args.scenario, gpu_count=len(gpus.types().get(env.gpu, [])))
    as_json = args.format == "json"
    console = Console(stderr=as_json)  # with --format json, standard output carries the JSON alone
    note = " (no GPU: DDP scenarios run over gloo on the CPU)" if not gpus.count else ""
    console.print(f"doctor: {len(cells)} scenarios of profile '{profile}' in {sys.executable}{note}")
    diagnosis = diagnose(cells, gpus, Path(args.reports) if args.reports else None, timeout=args.timeout, console=console)
    records = load_records(*folders, warn=warn)
    nearest = nearest_vetted(env, installed_pins(), records)
    if as_json:
        print(json.dumps(doctor_json(diagnosis, nearest, profile, folders), indent=2))
    else:
        print_diagnosis(console, diagnosis, nearest, bool(folders))
    return diagnosis.exit_code


def doctor_json(diagnosis: Diagnosis, nearest: Nearest | None, profile: str, results: Sequence[Path]) -> dict[str, Any]:
    """What `print_diagnosis` shows, for programs: the environment, each scenario's verdict (the keys of
    `classify --format json`), the exit rule's verdict, and the nearest vetted environment (null when the
    records given vet none, or none were given: `results` says which)."""
    env = diagnosis.env
    bad = [r.cell.scenario for r in diagnosis.healthy if r.klass != Outcome.OK]
    return {
        "environment": {"id": env.id, **env.axes(), "python_executable": sys.executable},
        "profile": profile,
        "scenarios": [
            {"id": r.id, "scenario": r.cell.scenario, "status": r.status, **r.outcome.as_dict(), "expect": r.expect, "control": r.control}
            for r in diagnosis.records
        ],
        "verdict": "not healthy" if bad else "healthy",
        "not_ok": bad,
        "exit_code": diagnosis.exit_code,
        "results": [str(f) for f in results],
        "nearest_vetted": None
        if nearest is None
        else {
            "env": nearest.env,
            "identical": nearest.identical,
            "gpu_differs": nearest.gpu_differs,
            "axes": [{"axis": a, "installed": mine, "vetted": theirs} for a, mine, theirs in nearest.axes],
            "packages": [{"name": n, "installed": mine, "vetted": theirs} for n, mine, theirs in nearest.packages],
        },
    }
