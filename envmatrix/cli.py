"""The `envmatrix` command: parse arguments, call the pure core, print, map errors to exit statuses."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from . import __version__, plan
from .backends.registry import NAMES as BACKEND_NAMES
from .backends.registry import BackendOptions, choose, make_backend
from .cells import SKIPPED, Cell, expand
from .classify import RunFacts, classify, control_status
from .errors import EnvmatrixError, InputError
from .execute import probe_command, run_logged
from .hostinfo import default_profile, detect_gpus
from .lock import write_lock
from .logscan import scan_stream
from .records import load_records
from .report import is_current, report_paths, write_report
from .runfacts import gather
from .runner import Paths, Runner
from .spec import Spec, load
from .summary import print_summary

Handler = Callable[[argparse.Namespace], int]


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", default="matrix.yaml", help="the matrix file (default: ./matrix.yaml)")
    p.add_argument("--profile", default="auto", help="profile in the matrix file (default: gpu on a GPU host, else cpu)")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN", help="keep cells whose id matches (fnmatch, braces); repeatable")
    p.add_argument("--skip", action="append", default=[], metavar="PATTERN", help="drop cells whose id matches; repeatable")
    p.add_argument("--gpu", default=None, help="only cells of this GPU type (default: all for plan, the host's for run)")


def select_cells(args: argparse.Namespace, *, gpu: str | None) -> tuple[Spec, str, list[Cell]]:
    """Load the matrix, resolve the profile and expand it with the command line's selection."""
    spec = load(args.file)
    profile = default_profile(detect_gpus()) if args.profile == "auto" else args.profile
    if profile not in spec.profiles:
        raise InputError(f"{args.file}: no profile '{profile}'; the file defines: {', '.join(spec.profiles)}")
    have = spec.profiles[profile].axes["gpu"]
    if gpu is not None and gpu not in have:
        raise InputError(f"--gpu {gpu}: profile '{profile}' has no such GPU; it has {', '.join(have)}")
    return spec, profile, expand(spec, profile, only=args.only, skip=args.skip, gpu=gpu)


def _warn(message: str) -> None:
    print(f"envmatrix: warning: {message}", file=sys.stderr)


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the cells of a profile and the environments they need."""
    _, profile, cells = select_cells(args, gpu=args.gpu)
    builds = plan.builds(cells)
    if args.format == "json":
        print(json.dumps([c.as_dict() for c in cells], indent=2))
        return 0
    console = Console(width=max(Console().width, 160) if not sys.stdout.isatty() else None)
    table = Table(title=f"profile {profile}: {len(cells)} cells", show_lines=False)
    for col in ("id", "cuda", "torch", "transformers", "flash_attn", "gpu", "python", "scenario", "status", "reason"):
        table.add_column(col, overflow="fold")
    for c in cells:
        e = c.env
        status = f"[yellow]{c.status}[/]" if c.status == SKIPPED else c.status
        table.add_row(c.id, e.cuda, e.torch, e.transformers, e.flash_attn, e.gpu, e.python, c.scenario.name, status, c.reason)
    console.print(table)
    tally = plan.counts(cells)
    console.print(f"{tally.get('planned', 0)} planned, {tally.get('skipped', 0)} skipped; {len(builds)} environments to build (images or venvs)")
    return 0


def cmd_classify(args: argparse.Namespace) -> int:
    """Classify a user's own training log: class, evidence line, remedy. Exit 0 whatever the class."""
    if args.log == "-":
        scan = scan_stream(sys.stdin.buffer)
    else:
        try:
            with open(args.log, "rb") as fh:
                scan = scan_stream(fh)
        except OSError as exc:
            raise InputError(f"{args.log}: cannot read the log: {exc.strerror or exc}; pass a readable file or - for standard input") from None
    verdict = classify(RunFacts(scan=scan, exit_code=args.exit_code))
    if args.json:
        print(json.dumps({**verdict.as_dict(), "lines": scan.lines, "bytes": scan.size}, indent=2))
    else:
        print(f"class:    {verdict.outcome}")
        print(f"evidence: {verdict.evidence}")
        print(f"remedy:   {verdict.remedy}")
        if verdict.also:
            print(f"also:     {', '.join(verdict.also)}")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
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
    if args.json:
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
    env = result.get("env") or {}
    console.print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items() if v is not None))
    console.print(f"class: [bold]{verdict.outcome}[/]  evidence: {verdict.evidence}")
    console.print(f"remedy: {verdict.remedy}")
    if summary["control"]:
        console.print(f"control (expects {scenario.expect}): {summary['control']}")
    console.print(f"log: {log}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run the matrix for this host's GPU type, record and classify every cell, print the summary."""
    gpus = detect_gpus()
    spec, profile, cells = select_cells(args, gpu=None)
    gpu = args.gpu or gpus.matrix_name
    if gpu is None:
        raise InputError(f"this host's GPU ({gpus.names[0]}) is not in the catalog; name its matrix GPU type with --gpu")
    console = Console()
    name, why = choose(args.backend, gpus.count)
    if args.backend == "auto":
        console.print(f"{why}: running profile '{profile}' ({gpu} cells) on the {name} backend")
    options = BackendOptions(profile_name=profile, profile=spec.profiles[profile], gpu_count=gpus.count, venvs=Path(args.venvs), base=Path(args.file).parent)
    backend = make_backend(name, options)
    backend.fork = not args.no_fork
    paths = Paths(Path(args.reports))
    runner = Runner(backend, paths, jobs=args.jobs, timeout=args.timeout, rerun=args.rerun, gpu_count=gpus.count, console=console)
    report = runner.run(cells, gpu)
    if not report.records:
        raise InputError(f"no cells of GPU type {gpu} in profile '{profile}' with this selection; see envmatrix plan --profile {profile}")
    print_summary(console, report.records, results_dir=str(paths.results))
    console.print(f"{report.ran} cells run, {report.cached} cached (unchanged inputs; --rerun forces), {report.other_gpus} left for other GPU types")
    outputs = report_paths(paths.root) if is_current(paths.results, paths.root) else write_report([paths.results], paths.root, _warn)
    console.print(f"report: {outputs['html']} (also {outputs['csv'].name}, {outputs['json'].name})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Render matrix.html, results.csv and results.json from one or more results folders."""
    folders = [Path(f) for f in (args.results or ["reports/results"])]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"no such results folder: {', '.join(missing)}; run the matrix first (nox -s matrix) or pass --results DIR")
    outputs = write_report(folders, Path(args.out), _warn)
    print(f"report: {outputs['html']} ({outputs['csv'].name}, {outputs['json'].name})")
    return 0


def cmd_lock(args: argparse.Namespace) -> int:
    """Write a lockfile for a vetted environment (or the newest vetted one for a GPU type)."""
    if not args.env and not args.best:
        raise InputError("name an environment id (see the report's vetted list) or --best GPU")
    folders = [Path(f) for f in (args.results or ["reports/results"])]
    records = load_records(*folders, warn=_warn)
    folder = write_lock(records, Path(args.out), env_id=args.env, best_gpu=args.best, trust_record_indexes=args.trust_record_indexes)
    print(f"lock: {folder}/requirements.lock, {folder}/pylock.toml, {folder}/sources.json")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line; each subcommand stores its handler in `func`."""
    parser = argparse.ArgumentParser(prog="envmatrix", description="Which CUDA / PyTorch / transformers / flash-attn stacks train cleanly, by experiment.")
    parser.add_argument("--version", action="version", version=f"envmatrix {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="list the cells of a profile with their status and skip reasons")
    _add_selection(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("run", help="run the matrix on this host: prepare environments, run cells, record and classify")
    _add_selection(p)
    p.add_argument("--backend", choices=BACKEND_NAMES, default="auto", help="how environments are made (default: venv)")
    p.add_argument("--jobs", type=int, default=1, help="cells at once (on a GPU host each slot owns whole GPUs)")
    p.add_argument("--rerun", action="store_true", help="run cells again even when their record is up to date")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per cell before its process group is killed")
    p.add_argument("--reports", default="reports", help="output folder (records in results/, logs in logs/)")
    p.add_argument("--venvs", default=".envmatrix/venvs", help="where the venv backend keeps its environments")
    p.add_argument(
        "--no-fork", action="store_true", help="start a fresh probe process per cell (default: a helper per environment forks each single-process cell)"
    )
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("report", help="render matrix.html, results.csv and results.json from results folders")
    p.add_argument("--results", action="append", default=None, metavar="DIR", help="a results folder; repeat to merge runners (default reports/results)")
    p.add_argument("--out", default="reports", help="output folder (default reports)")
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("lock", help="write a pinned, hashed lockfile for a vetted environment")
    p.add_argument("env", nargs="?", default=None, help="environment id, e.g. cpu-torch2.13.0-tf5.23.0-fanone-cpu-py3.11")
    p.add_argument("--best", default=None, metavar="GPU", help="lock the newest vetted environment for this GPU type")
    p.add_argument("--results", action="append", default=None, metavar="DIR", help="results folder(s) (default reports/results)")
    p.add_argument("--out", default="reports", help="output folder; the lock goes to OUT/locks/<env>/")
    p.add_argument(
        "--trust-record-indexes", action="store_true", help="look files up on the package sources a record names even where they differ from your pip settings"
    )
    p.set_defaults(func=cmd_lock)
    p = sub.add_parser("classify", help="tell which known failure a training log shows, with evidence and remedy")
    p.add_argument("log", help="the log file, or - for standard input")
    p.add_argument("--exit-code", type=int, default=None, help="the run's exit status (-N or 128+N for signal N)")
    p.add_argument("--json", action="store_true", help="print an object with class, evidence and remedy")
    p.set_defaults(func=cmd_classify)
    p = sub.add_parser("probe", help="run the GRPO smoke probe in this interpreter and classify it")
    p.add_argument("--file", default="matrix.yaml", help="the matrix file the scenario comes from")
    p.add_argument("--scenario", default="fp32-sdpa", help="scenario name in the matrix file (default fp32-sdpa)")
    p.add_argument("--out", default=None, help="output folder (default: a new temporary folder)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds before the probe is killed")
    p.add_argument("--json", action="store_true", help="print what it measured and the verdict as JSON")
    p.set_defaults(func=cmd_probe)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit status 0 on success, the error family's status otherwise."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.func
    try:
        return handler(args)
    except EnvmatrixError as exc:
        if args.debug:
            raise
        print(f"envmatrix: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("envmatrix: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
