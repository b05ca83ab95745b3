"""`envmatrix probe`: run the GRPO smoke probe in this interpreter and classify it."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

from rich.table import Table

from ..errors import InputError
from ..outputs.terminal import Console
from ..run.execute import probe_command, run_logged
from ..spec.matrix import load
from ..verdict.classify import classify, control_status
from ..verdict.runfacts import gather
from . import options


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("probe", help="run the GRPO smoke probe in this interpreter and classify it")
    options.FILE.add(p)
    p.add_argument("--scenario", default="fp32-sdpa", help="scenario name in the matrix file (default fp32-sdpa)")
    p.add_argument("--out", default=None, help="output folder (default: a new temporary folder)")
    options.TIMEOUT.add(p)
    options.add_format(p, json_alias=True)
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Run the probe in this interpreter: does MY environment train cleanly?"""
    spec = load(args.file)
    if args.scenario not in spec.scenarios:
        raise InputError(f"--scenario {args.scenario}: not defined in {args.file}; defined: {', '.join(spec.scenarios)}")
    scenario = spec.scenarios[args.scenario]
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="envmatrix-probe-"))
    log = out / "probe.log"
    done = run_logged(probe_command(sys.executable, scenario, out), log, timeout=args.timeout)
    facts = gather(out, log, exit_code=done.exit_code, timed_out=done.timed_out)
    verdict = classify(facts)
    result = facts.result or {}
    summary = {
        "scenario": scenario.name,
        "expect": scenario.expect,
        "control": control_status(scenario.expect, verdict.outcome),
        **verdict.as_dict(),
        "exit_code": done.exit_code,
        "seconds": done.seconds,
        "out": str(out),
        "log": str(log),
        "metrics": list(facts.metrics),
        "result": result,
    }
    if args.format == "json":
        print(json.dumps(summary, indent=2, default=str))
        return 0
    console = Console()
    table = Table(title=f"probe {scenario.name}: {len(facts.metrics)} steps in {done.seconds} s")
    cols = ("step", "loss", "grad_norm", "reward", "reward_std", "frac_reward_zero_std", "step_time")
    for col in cols:
        table.add_column(col)
    for m in facts.metrics:
        table.add_row(*(f"{m.get(c):.4g}" if isinstance(m.get(c), float) else str(m.get(c)) for c in cols))
    console.print(table)
    env = facts.measured.env
    seen = {f.name: getattr(env, f.name) for f in dataclasses.fields(env)} if env is not None else {}
    console.print("environment: " + ", ".join(f"{k} {v}" for k, v in seen.items() if v is not None))
    console.print(f"class: [bold]{verdict.outcome}[/]  evidence: {verdict.evidence}")
    console.print(f"remedy: {verdict.remedy}")
    if summary["control"]:
        console.print(f"control (expects {scenario.expect}): {summary['control']}")
    console.print(f"log: {log}")
    return 0
