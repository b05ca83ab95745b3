"""`envmatrix preflight`: a user's own architecture and GRPO settings, shrunk to a smoke run, trained in this
interpreter or as a scenario in every environment of a profile."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from ..errors import BackendError, InputError
from ..host.gpus import HostGpus, detect_gpus
from ..outputs.terminal import Console
from ..plan.expand import expand
from ..records.outcomes import Outcome
from ..records.record import Status
from ..spec.matrix import Scenario, Spec, load
from . import options
from .common import profile_name
from .run import add_run_options, run_matrix

#: Which transformers releases know which model_types, read from their wheels once (envmatrix.facts.archsupport).
ARCH_CACHE = Path(".envmatrix") / "cache" / "transformers-model-types.json"


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("preflight", help="will MY model and GRPO settings train? a tiny model of your architecture, trained here or across the matrix")
    p.add_argument("--model-config", required=True, metavar="DIR", help="a folder with your model's config.json and tokenizer files (no weights needed)")
    p.add_argument("--grpo-config", metavar="FILE", help="your TRL GRPOConfig as YAML or JSON: its settings become the run's (keys not modelled are listed)")
    p.add_argument("--trainer", choices=("builtin", "trl"), default="builtin", help="the probe's own GRPO loop or TRL's GRPOTrainer (default: builtin)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow the Python files your config.json or tokenizer names (auto_map) to run")
    p.add_argument("--matrix", action="store_true", help="run it as a scenario in every environment of the profile (records, report, findings)")
    options.FILE.add(p)
    options.PROFILE.add(p)
    options.add_selection(p)
    add_run_options(p, reports=(None, "reports with --matrix, else a new temporary folder"))
    options.add_format(p)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Check the inputs (exit 2 on any problem), build the scenario, run it here or across the matrix."""
    from ..answers import grpoconfig, preflight

    model = preflight.user_model(Path(args.model_config), trust_remote_code=args.trust_remote_code)
    mapped = grpoconfig.read(Path(args.grpo_config)) if args.grpo_config else grpoconfig.Mapped()
    if mapped.fields.get("trainer") == "trl" and args.trainer != "trl":
        args.trainer = "trl"
    spec = load(args.file)
    gpus = detect_gpus()
    profile = profile_name(args, spec, gpus)
    as_json = args.format == "json"
    console = Console(stderr=as_json)
    scenario = preflight.scenario(model, mapped, trainer=args.trainer)
    if mapped.unmodelled:
        shown = ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in mapped.unmodelled.items())
        console.print(f"not modelled by the probe (listed, not applied): {escape(shown)}")
    for note in mapped.notes:
        console.print(f"note: {escape(note)}")
    if args.matrix:
        return _across(args, spec, profile, scenario, model, gpus, console, as_json)
    return _here(args, spec, profile, scenario, model, mapped, gpus, console, as_json)


def _here(
    args: argparse.Namespace, spec: Spec, profile: str, scenario: Scenario, model: Any, mapped: Any, gpus: HostGpus, console: Console, as_json: bool
) -> int:
    """Train it in this interpreter (the host backend, as doctor does): verdict, evidence, remedy."""
    from ..answers import preflight
    from ..answers.doctor import cells_for, diagnose, installed_environment

    spec = preflight.with_scenario(spec, profile, scenario)
    env = installed_environment(gpus, spec.profiles[profile].packages)
    cells = cells_for(spec, profile, env, [scenario.name], gpu_count=len(gpus.types().get(env.gpu, [])))
    console.print(f"preflight: {escape(model.model_type)} from {escape(str(model.folder))}, shrunk, in {escape(sys.executable)}")
    reports = Path(args.reports) if args.reports else None
    record = diagnose(cells, gpus, reports, timeout=args.timeout, console=console).records[0]
    refused = preflight.probe_refusal(record)
    if record.klass == Outcome.UNKNOWN_MODEL:
        refused = f"{refused}; {preflight.first_release_line(model.model_type, ARCH_CACHE)[1]}"
    if refused is not None and not as_json:
        raise InputError(f"--model-config {model.folder}: {refused}")
    if record.status == Status.SKIPPED and not as_json:  # an engine or package this interpreter lacks: exit 3
        raise BackendError(f"not run here: {record.outcome.evidence}; install it in {sys.executable}, or run --matrix over environments that have it")
    answer = preflight.summary(record, model, mapped, gpus)
    if as_json:
        print(json.dumps(answer, indent=2, default=str))
        return int(answer["exit_code"])
    _print(console, answer)
    return int(answer["exit_code"])


def _print(console: Console, answer: dict[str, Any]) -> None:
    built = answer["model"]
    if built:
        changed = ", ".join(f"{k} {v}" for k, v in built.get("changes", {}).items())
        console.print(f"built: {escape(str(built.get('class')))}, {built.get('layers')} layers, {built.get('params'):,} parameters ({escape(changed)})")
        for note in built.get("notes") or ():
            console.print(f"  {escape(str(note))}")
    style = "bold green" if answer["class"] == "ok" else "bold red"
    console.print(f"verdict: [{style}]{answer['class']}[/] in {answer['seconds']} s")
    console.print(f"evidence: {escape(str(answer['evidence']))}")
    if answer["class"] != "ok":
        console.print(f"remedy: {escape(str(answer['remedy']))}")
    console.print(f"log: {escape(str(answer['log']))}")


def _across(args: argparse.Namespace, spec: Spec, profile: str, scenario: Scenario, model: Any, gpus: HostGpus, console: Console, as_json: bool) -> int:
    """The preflight as the profile's one scenario, through the ordinary runner, records and report."""
    from ..answers import preflight
    from ..backends.registry import choose
    from ..outputs.findings import find

    name, _ = choose(args.backend, gpus.count)
    if name == "docker":
        raise InputError(f"--matrix runs on the venv or host backend: a container does not see {scenario.model}; pass --backend venv")
    args.reports = args.reports or "reports"
    spec = preflight.with_scenario(spec, profile, scenario)
    cells = expand(spec, profile, only=args.only, skip=args.skip, host=gpus)
    if not cells:
        raise InputError(f"profile '{profile}': the selection matches no environment; list them with envmatrix plan --profile {profile}")
    records = run_matrix(args, spec, profile, cells, gpus, console)
    mine = [r for r in records if r.cell.scenario == scenario.name]
    findings = [f.text for f in find(mine).findings]
    first, line = None, None
    if any(r.klass == Outcome.UNKNOWN_MODEL for r in mine):
        first, line = preflight.first_release_line(model.model_type, ARCH_CACHE)
        console.print(escape(line))
    if as_json:
        cells_json = [{"id": r.id, "env": r.env, "status": r.status, **r.outcome.as_dict()} for r in mine]
        answer = {"scenario": scenario.name, "description": scenario.description, "cells": cells_json, "findings": findings}
        print(json.dumps({**answer, "first_release": first, "first_release_note": line}, indent=2))
    return 0
