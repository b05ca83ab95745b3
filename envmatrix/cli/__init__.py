"""The `envmatrix` command: parse arguments, call the pure core, print, map errors to exit statuses."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .. import __version__
from ..backends.registry import NAMES as BACKEND_NAMES
from ..backends.registry import BackendOptions, choose, make_backend
from ..errors import BackendError, EnvmatrixError, InputError, OutputError, SpecError, printable
from ..facts import catalog
from ..host.gpus import default_profile, detect_gpus
from ..outputs.findings import find
from ..outputs.lock import write_lock
from ..outputs.report import is_current, report_paths, write_report
from ..outputs.summary import print_findings, print_summary
from ..plan import builds as plan
from ..plan.cells import SKIPPED, Cell
from ..plan.expand import expand
from ..plan.install import Sources
from ..plan.resolve import ResolveOutcome, resolve_cells, unreachable_error
from ..plan.shard import shard
from ..records.record import load_records
from ..run.execute import probe_command, run_logged
from ..run.runner import Paths, Runner
from ..spec.matrix import Spec, check_pattern, load
from ..submit import SubmitError, fanout, write_files
from ..submit import github as gh_submit
from ..submit import k8s as k8s_submit
from ..submit import slurm as slurm_submit
from ..verdict.classify import RunFacts, classify, control_status
from ..verdict.logscan import scan_stream
from ..verdict.runfacts import gather

Handler = Callable[[argparse.Namespace], int]
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a reader that went away
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_JOBS = 256


def seconds(text: str) -> float:
    """--timeout: a finite number of seconds above 0 (0, negatives and nan would mean 'no time' or 'no limit')."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; write one such as 600") from None
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} (a week), such as 600")
    return value


def bounded_int(what: str, lo: int, hi: int, example: str) -> Callable[[str], int]:
    """An argparse type: a whole number in [lo, hi], else a message naming `what` and an example."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}; write one such as {example}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} is {lo} to {hi}")
        return value

    return parse


jobs = bounded_int("a whole number of cells at once", 1, MAX_JOBS, "2")
exit_code = bounded_int("an exit status (0 to 255, or -N for signal N)", -255, 255, "1, 136 or -8")


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--file", default="matrix.yaml", help="the matrix file (default: ./matrix.yaml)")
    p.add_argument("--profile", default="auto", help="profile in the matrix file (default: gpu on a GPU host, else cpu)")
    p.add_argument("--only", action="append", default=[], metavar="PATTERN", help="keep cells whose id matches (fnmatch, braces); repeatable")
    p.add_argument("--skip", action="append", default=[], metavar="PATTERN", help="drop cells whose id matches; repeatable")
    p.add_argument("--gpu", default=None, help="only cells of this GPU type (default: all for plan, the host's for run)")


def shard_arg(text: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N: argparse reports anything else as a usage error (exit status 2)."""
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"'{text}' is not a shard: write I/N with 1 <= I <= N, e.g. 2/4 for the second of four")
    return int(m.group(1)), int(m.group(2))


def _add_shard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", type=shard_arg, default=None, metavar="I/N", help="only shard I of N: environments kept whole, cost-balanced per GPU type")


def take_shard(cells: list[Cell], which: tuple[int, int] | None) -> list[Cell]:
    """The cells of shard I of N (all cells when no shard was asked for)."""
    if which is None:
        return cells
    return shard(cells, which[1])[which[0] - 1]


def select_cells(args: argparse.Namespace, *, gpu: str | None) -> tuple[Spec, str, list[Cell]]:
    """Load the matrix, resolve the profile and expand it with the command line's selection; a selection
    that matches no cell is bad input (exit 2) for plan and run alike."""
    bad = [f"--{flag} {problem}" for flag in ("only", "skip") for p in getattr(args, flag) if (problem := check_pattern(p))]
    if bad:
        raise SpecError(bad)
    spec = load(args.file)
    profile = default_profile(detect_gpus()) if args.profile == "auto" else args.profile
    if profile not in spec.profiles:
        raise InputError(f"{args.file}: no profile '{profile}'; the file defines: {', '.join(spec.profiles)}")
    have = spec.profiles[profile].axes["gpu"]
    if gpu is not None and gpu not in have:
        raise InputError(f"--gpu {gpu}: profile '{profile}' has no such GPU; it has {', '.join(have)}")
    cells = expand(spec, profile, only=args.only, skip=args.skip, gpu=gpu)
    if not cells:
        given = [f"--{flag} {p}" for flag in ("only", "skip") for p in getattr(args, flag)] + ([f"--gpu {gpu}"] if gpu else [])
        prof = spec.profiles[profile]
        given += [f"{key}: in {args.file}" for key in ("select", "skip") if getattr(prof, key)]
        raise InputError(f"profile '{profile}': the selection ({', '.join(given)}) matches no cell; list the ids with envmatrix plan --profile {profile}")
    return spec, profile, cells


def _warn(message: str) -> None:
    print(f"envmatrix: warning: {message}", file=sys.stderr)


def cmd_plan(args: argparse.Namespace) -> int:
    """Print the cells of a profile and the environments they need."""
    spec, profile, cells = select_cells(args, gpu=args.gpu)
    cells = take_shard(cells, args.shard)
    outcome = resolve_cells(cells, Sources.of(spec.profiles[profile], Path(args.file).parent)) if args.resolve else None
    cells = outcome.cells if outcome else cells
    builds = plan.builds(cells)
    if args.format == "json":
        rows = [c.as_dict() for c in cells]
        resolved = {k: v.as_dict() for k, v in outcome.resolutions.items()} if outcome else None
        print(json.dumps({"cells": rows, "resolutions": resolved, "unreachable": outcome.unreachable} if outcome else rows, indent=2))
        if outcome and outcome.unreachable:
            raise unreachable_error(outcome)
        return 0
    console = Console(width=max(Console().width, 160) if not sys.stdout.isatty() else None)
    part = f", shard {args.shard[0]}/{args.shard[1]}" if args.shard else ""
    table = Table(title=f"profile {profile}{part}: {len(cells)} cells", show_lines=False)
    for col in ("id", "cuda", "torch", "transformers", "flash_attn", "gpu", "python", "scenario", "status", "reason"):
        table.add_column(col, overflow="fold")
    for c in cells:
        e = c.env
        status = f"[yellow]{c.status}[/]" if c.status == SKIPPED else c.status
        table.add_row(c.id, e.cuda, e.torch, e.transformers, e.flash_attn, e.gpu, e.python, c.scenario.name, status, c.reason)
    console.print(table)
    tally = plan.counts(cells)
    console.print(f"{tally.get('planned', 0)} planned, {tally.get('skipped', 0)} skipped; {len(builds)} environments to build (images or venvs)")
    if outcome:
        _print_resolutions(console, outcome)
    return 0


def _print_resolutions(console: Console, outcome: ResolveOutcome) -> None:
    """The files each environment resolves to (name, version, URL, sha256), then what went unchecked."""
    for build_id, res in sorted(outcome.resolutions.items()):
        head = "resolves" if res.ok else "does not resolve"
        console.print(f"[bold]{build_id}[/] {head}{' (cached)' if res.cached else ''}" + ("" if res.ok else f": {res.reason}"))
        for f in res.files:
            console.print(f"  {f.name}=={f.version}  {f.url}  sha256:{f.sha256[:16]}…", soft_wrap=True, highlight=False)
    if outcome.unreachable:
        raise unreachable_error(outcome)


def cmd_classify(args: argparse.Namespace) -> int:
    """Classify a user's own training log: class, evidence line, remedy. Exit 0 whatever the class."""
    if args.log == "-":
        if sys.stdin is None:
            raise InputError("standard input is closed; pipe a log in (… | envmatrix classify -) or pass the log's path")
        try:
            scan = scan_stream(sys.stdin.buffer)
        except OSError as exc:
            raise InputError(f"standard input: cannot read the log: {exc.strerror or exc}; pipe a log in or pass the log's path") from None
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
    if args.shard is not None:
        cells = take_shard([c for c in cells if c.env.gpu == gpu], args.shard)
        console.print(f"shard {args.shard[0]}/{args.shard[1]} of GPU type {gpu}: {len(cells)} cells")
        if not cells:
            console.print("nothing to do in this shard (more shards than environments)")
            return 0
    name, why = choose(args.backend, gpus.count)
    if args.backend == "auto":
        console.print(f"{why}: running profile '{profile}' ({gpu} cells) on the {name} backend")
    options = BackendOptions(profile_name=profile, profile=spec.profiles[profile], gpu_count=gpus.count, venvs=Path(args.venvs), base=Path(args.file).parent)
    backend = make_backend(name, options)
    backend.fork = not args.no_fork
    if not args.no_resolve and backend.name != "host":  # the host backend installs nothing
        outcome = resolve_cells([c for c in cells if c.env.gpu == gpu], options.sources)
        if outcome.unreachable:
            raise unreachable_error(outcome)
        checked = {c.id: c for c in outcome.cells}
        cells = [checked.get(c.id, c) for c in cells]
    paths = Paths(Path(args.reports))
    runner = Runner(backend, paths, jobs=args.jobs, timeout=args.timeout, rerun=args.rerun, gpu_count=gpus.count, console=console)
    report = runner.run(cells, gpu)
    if not report.records:
        raise InputError(f"no cells of GPU type {gpu} in profile '{profile}' with this selection; see envmatrix plan --profile {profile}")
    print_summary(console, report.records, results_dir=str(paths.results))
    console.print(f"{report.ran} cells run, {report.cached} cached (unchanged inputs; --rerun forces), {report.other_gpus} left for other GPU types")
    outputs = report_paths(paths.root) if is_current(paths.results, paths.root) else write_report([paths.results], paths.root, _warn)
    console.print(f"report: {outputs['html']} (also {outputs['csv'].name}, {outputs['json'].name})")
    attempted = [r for r in report.records if r.status != "skipped"]
    if attempted and all(r.status == "build_failed" for r in attempted):
        raise BackendError(
            f"no environment could be prepared: all {len(attempted)} cells that should run failed to build; "
            f"the build logs are in {paths.logs / 'builds'} (the report shows their tails)"
        )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Render matrix.html, results.csv and results.json from one or more results folders."""
    folders = [Path(f) for f in (args.results or ["reports/results"])]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"no such results folder: {', '.join(missing)}; run the matrix first (nox -s matrix) or pass --results DIR")
    since = [Path(f) for f in args.since] if args.since else None
    missing = [str(f) for f in since or [] if not f.is_dir()]
    if missing:
        raise InputError(f"--since {', '.join(missing)}: no such results folder; pass an earlier run's results folder (e.g. a copy of reports/results)")
    outputs = write_report(folders, Path(args.out), _warn, since=since)
    console = Console()
    records = load_records(*folders)
    print_findings(console, find(records, load_records(*since) if since else ()))
    print(f"report: {outputs['html']} ({outputs['csv'].name}, {outputs['json'].name})")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
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


def cmd_lock(args: argparse.Namespace) -> int:
    """Write a lockfile for a vetted environment (or the newest vetted one for a GPU type)."""
    if not args.env and not args.best:
        raise InputError("name an environment id (see the report's vetted list) or --best GPU")
    folders = [Path(f) for f in (args.results or ["reports/results"])]
    records = load_records(*folders, warn=_warn)
    folder = write_lock(records, Path(args.out), env_id=args.env, best_gpu=args.best, trust_record_indexes=args.trust_record_indexes)
    print(f"lock: {folder}/requirements.lock, {folder}/pylock.toml, {folder}/sources.json")
    return 0


def _pairs(flag: str, values: list[str]) -> list[str]:
    return [x for v in values for x in (flag, v)]


def cmd_submit(args: argparse.Namespace) -> int:
    """Write (and for Slurm submit and wait for) one job per GPU type with a task per shard, then a report job."""
    if args.engine != "slurm" and (args.submit or args.wait):
        raise InputError(f"--submit and --wait are for slurm; for {args.engine}, commit or apply the files written (see README)")
    if args.wait and not args.submit:
        raise InputError("--wait needs --submit")
    spec, profile, cells = select_cells(args, gpu=args.gpu)
    slurm = args.engine == "slurm"
    # Slurm tasks run on a shared file system from this folder: absolute paths. Elsewhere: the checkout's or the volume's.
    file_, reports = (str(Path(args.file).resolve()), str(Path(args.reports).resolve())) if slurm else (args.file, args.reports)
    if args.engine == "k8s" and not Path(reports).is_absolute():
        reports = f"{k8s_submit.MOUNT}/{reports}"  # on the shared volume; the matrix file comes with the image
    run_args = ["--file", file_, "--profile", profile, *_pairs("--only", args.only), *_pairs("--skip", args.skip)]
    run_args += ["--backend", args.backend, "--jobs", str(args.jobs), "--timeout", f"{args.timeout:g}", "--reports", reports]
    f = fanout(spec, profile, cells, run_args=run_args, reports=reports)
    if slurm:
        files = slurm_submit.scripts(f, cwd=os.getcwd())
    elif args.engine == "github":
        files = {f"envmatrix-{profile}.yml": gh_submit.render(f)}
    else:
        files = k8s_submit.manifests(f)
    for job in f.jobs:
        sizes = ", ".join(str(len(s)) for s in job.shards)
        print(f"{job.gpu}: {job.target.shards} shards of {sizes} cells (throttle {f.throttle(job)})", file=sys.stderr)
    if args.dry_run:
        for name, text in files.items():
            print(f"# ---- {name}\n{text}")
        return 0
    folder = Path(args.out or Path(args.reports) / "submit" / args.engine)
    for path in write_files(folder, files):
        print(f"wrote {path}")
    if not args.submit:
        return 0
    sub = slurm_submit.submit(folder.resolve(), f)
    print(f"submitted: arrays {', '.join(f'{g} {j}' for g, j in sub.arrays.items())}; report job {sub.report} (afterany)")
    if not args.wait:
        return 0
    states = slurm_submit.wait(sub)
    html = Path(reports) / "matrix.html"
    print(f"report: {html}" if html.is_file() else f"no report at {html}: see {reports}/slurm-logs/report-{sub.report}.log")
    bad = sorted(k for k, v in states.items() if v != "COMPLETED")
    if bad:
        raise SubmitError(
            f"not completed: {', '.join(f'{k} ({states[k]})' for k in bad)}; the report shows what finished; submit again to run only the missing cells"
        )
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    """Bisect an axis's releases to the first one where a scenario's outcome changes (real runs).
    Exit 0 when found, 1 when the outcome changes more than once or the boundary hides behind
    releases that cannot be installed, 2 when an endpoint does not show the outcome claimed."""
    from ..answers.bisect import ENDPOINT, FOUND
    from ..answers.bisect_run import BisectRequest, print_bisect, run_bisect

    spec = load(args.file)
    gpus = detect_gpus()
    profile = default_profile(gpus) if args.profile == "auto" else args.profile
    if profile not in spec.profiles:
        raise InputError(f"{args.file}: no profile '{profile}'; the file defines: {', '.join(spec.profiles)}")
    gpu = args.gpu or gpus.matrix_name
    if gpu is None:
        raise InputError(f"this host's GPU ({gpus.names[0]}) is not in the catalog; name its matrix GPU type with --gpu")
    name, _ = choose(args.backend, gpus.count)
    request = BisectRequest(
        axis=args.axis, good=args.good, bad=args.bad, scenario=args.scenario, profile=profile, gpu=gpu, backend=name,
        reports=Path(args.reports), venvs=Path(args.venvs), base=Path(args.file).parent, timeout=args.timeout, pre=args.pre, gpu_count=gpus.count,
    )  # fmt: skip
    console = Console()
    run = run_bisect(spec, request, console)
    print_bisect(console, request, run)
    return 0 if run.result.status == FOUND else 2 if run.result.status == ENDPOINT else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    """Probe this interpreter with the scenarios the hardware can run; compare it with the vetted
    environments of the records given. Exit 0 when every healthy scenario is ok, 1 when one is not."""
    from ..answers.doctor import cells_for, diagnose, installed_environment, installed_pins, nearest_vetted, print_diagnosis

    spec = load(args.file)
    gpus = detect_gpus()
    profile = default_profile(gpus) if args.profile == "auto" else args.profile
    if profile not in spec.profiles:
        raise InputError(f"{args.file}: no profile '{profile}'; the file defines: {', '.join(spec.profiles)}")
    if gpus.matrix_name is None:
        raise InputError(f"this host's GPU ({gpus.names[0]}) is not in the catalog; doctor cannot tell which scenarios it can run")
    folders = [Path(f) for f in args.results or []]
    missing = [str(f) for f in folders if not f.is_dir()]
    if missing:
        raise InputError(f"--results {', '.join(missing)}: no such results folder")
    env = installed_environment(gpus)
    cells = cells_for(spec, profile, env, args.scenario)
    console = Console()
    note = " (no GPU: DDP scenarios run over gloo on the CPU)" if not gpus.count else ""
    console.print(f"doctor: {len(cells)} scenarios of profile '{profile}' in {sys.executable}{note}")
    diagnosis = diagnose(cells, gpus, Path(args.reports) if args.reports else None, timeout=args.timeout, console=console)
    records = load_records(*folders, warn=_warn)
    print_diagnosis(console, diagnosis, nearest_vetted(env, installed_pins(), records), bool(folders))
    return diagnosis.exit_code


def build_parser() -> argparse.ArgumentParser:
    """The command line; each subcommand stores its handler in `func`."""
    parser = argparse.ArgumentParser(prog="envmatrix", description="Which CUDA / PyTorch / transformers / flash-attn stacks train cleanly, by experiment.")
    parser.add_argument("--version", action="version", version=f"envmatrix {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="list the cells of a profile with their status and skip reasons")
    _add_selection(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    _add_shard(p)
    p.add_argument("--resolve", action="store_true", help="ask uv whether each environment installs, and show the files it would get")
    p.set_defaults(func=cmd_plan)
    p = sub.add_parser("run", help="run the matrix on this host: prepare environments, run cells, record and classify")
    _add_selection(p)
    p.add_argument("--backend", choices=BACKEND_NAMES, default="auto", help="how environments are made (default: venv)")
    p.add_argument("--jobs", type=jobs, default=1, help="cells at once (on a GPU host each slot owns whole GPUs)")
    p.add_argument("--rerun", action="store_true", help="run cells again even when their record is up to date")
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds per cell before its process group is killed")
    p.add_argument("--reports", default="reports", help="output folder (records in results/, logs in logs/)")
    p.add_argument("--venvs", default=".envmatrix/venvs", help="where the venv backend keeps its environments")
    p.add_argument(
        "--no-fork", action="store_true", help="start a fresh probe process per cell (default: a helper per environment forks each single-process cell)"
    )
    _add_shard(p)
    p.add_argument("--no-resolve", action="store_true", help="skip the resolver check before building (e.g. no index reachable)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("submit", help="fan the matrix out on Slurm arrays, GitHub Actions runners or Kubernetes Indexed Jobs")
    p.add_argument("engine", choices=("slurm", "github", "k8s"), help="the scheduler to write jobs for")
    _add_selection(p)
    p.add_argument("--backend", choices=("auto", "venv", "host", "docker"), default="auto", help="passed to each shard's envmatrix run")
    p.add_argument("--jobs", type=int, default=1, help="passed to each shard's envmatrix run")
    p.add_argument("--timeout", type=float, default=600.0, help="passed to each shard's envmatrix run")
    p.add_argument("--reports", default="reports", help="the shared output folder every shard writes its records into")
    p.add_argument("--out", default=None, help="where the generated files go (default REPORTS/submit/ENGINE)")
    p.add_argument("--dry-run", action="store_true", help="print the generated files; write and submit nothing")
    p.add_argument("--submit", action="store_true", help="slurm: submit the arrays and the report job with sbatch")
    p.add_argument("--wait", action="store_true", help="slurm: wait for the report job, print where the merged report is")
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("report", help="render matrix.html, results.csv and results.json from results folders")
    p.add_argument("--results", action="append", default=None, metavar="DIR", help="a results folder; repeat to merge runners (default reports/results)")
    p.add_argument("--out", default="reports", help="output folder (default reports)")
    p.add_argument("--since", action="append", default=None, metavar="OLD_RESULTS", help="an earlier run's results folder: changed cells lead the findings")
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
    p = sub.add_parser("catalog", help="print what envmatrix knows about torch, flash-attn, GPUs and CUDA, with sources and dates")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_catalog)
    p = sub.add_parser("classify", help="tell which known failure a training log shows, with evidence and remedy")
    p.add_argument("log", help="the log file, or - for standard input")
    p.add_argument("--exit-code", type=exit_code, default=None, help="the run's exit status (-N or 128+N for signal N)")
    p.add_argument("--json", action="store_true", help="print an object with class, evidence and remedy")
    p.set_defaults(func=cmd_classify)
    p = sub.add_parser("probe", help="run the GRPO smoke probe in this interpreter and classify it")
    p.add_argument("--file", default="matrix.yaml", help="the matrix file the scenario comes from")
    p.add_argument("--scenario", default="fp32-sdpa", help="scenario name in the matrix file (default fp32-sdpa)")
    p.add_argument("--out", default=None, help="output folder (default: a new temporary folder)")
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds before the probe is killed")
    p.add_argument("--json", action="store_true", help="print what it measured and the verdict as JSON")
    p.set_defaults(func=cmd_probe)
    p = sub.add_parser("bisect", help="find the first release of an axis where a scenario's outcome changes, by real runs")
    p.add_argument("--axis", required=True, help="torch, transformers or flash_attn")
    p.add_argument("--good", required=True, metavar="V1", help="a release where the scenario trains (ok)")
    p.add_argument("--bad", required=True, metavar="V2", help="a release where it fails")
    p.add_argument("--scenario", required=True, help="scenario name in the matrix file")
    p.add_argument("--file", default="matrix.yaml", help="the matrix file (default: ./matrix.yaml)")
    p.add_argument("--profile", default="auto", help="profile giving the other axes (default: gpu on a GPU host, else cpu)")
    p.add_argument("--gpu", default=None, help="matrix GPU type (default: this host's)")
    p.add_argument("--backend", choices=BACKEND_NAMES, default="venv", help="how environments are made (default: venv)")
    p.add_argument("--pre", action="store_true", help="include pre-releases")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per cell")
    p.add_argument("--reports", default="reports", help="output folder: records go to REPORTS/results like envmatrix run's")
    p.add_argument("--venvs", default=".envmatrix/venvs", help="where the venv backend keeps its environments")
    p.set_defaults(func=cmd_bisect)
    p = sub.add_parser("doctor", help="is the environment in hand a good one? probe it and compare with vetted environments")
    p.add_argument("--file", default="matrix.yaml", help="the matrix file (default: ./matrix.yaml)")
    p.add_argument("--profile", default="auto", help="profile whose scenarios to run (default: gpu on a GPU host, else cpu)")
    p.add_argument("--scenario", action="append", default=[], help="run only this scenario; repeatable (default: the profile's that fit)")
    p.add_argument("--results", action="append", default=None, metavar="DIR", help="results folder(s) with vetted environments to compare with")
    p.add_argument("--reports", default=None, help="where the doctor's own records go (default: a new temporary folder)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per scenario")
    p.set_defaults(func=cmd_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: exit status 0 on success, the error family's status otherwise; never a traceback
    (unless --debug). Output trouble is an error too: a reader that went away (`| head -1`) ends
    quietly with 141, a full or unwritable output exits 2 naming it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.func
    try:
        code = handler(args)
        if sys.stdout is not None:
            sys.stdout.flush()  # a full device or a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        _drop_stdout()
        return EXIT_BROKEN_PIPE
    except EnvmatrixError as exc:
        if args.debug:
            raise
        _error(exc)
        return exc.exit_code
    except OSError as exc:
        if args.debug:
            raise
        _drop_stdout()
        err = OutputError(_os_problem(exc))
        _error(err)
        return err.exit_code
    except KeyboardInterrupt:
        print("envmatrix: interrupted", file=sys.stderr)
        return 130


def _os_problem(exc: OSError) -> str:
    """An OSError that no command turned into its own message: the path, the reason, what to do."""
    where = f"{exc.filename}: " if exc.filename else "standard output: " if exc.errno in (errno.ENOSPC, errno.EIO, errno.EBADF) else ""
    hint = {
        errno.ENOSPC: "free some space or write elsewhere",
        errno.EDQUOT: "free some space or write elsewhere",
        errno.EACCES: "choose a folder you can write (--out, --reports)",
        errno.EPERM: "choose a folder you can write (--out, --reports)",
        errno.EROFS: "choose a folder on a writable file system (--out, --reports)",
        errno.EEXIST: "it is a file where a folder is needed; choose another --out/--reports",
        errno.ENOTDIR: "part of the path is a file, not a folder; choose another --out/--reports",
        errno.EISDIR: "it is a folder where a file is needed",
    }.get(exc.errno or 0, "check the path and the disk")
    return f"{where}{exc.strerror or exc}; {hint}"


def _error(exc: EnvmatrixError) -> None:
    """Print an error with control characters escaped: names from files must not drive the terminal."""
    lines = exc.problems if isinstance(exc, SpecError) else str(exc).split("\n")
    text = "\n".join(printable(line) for line in lines)
    with contextlib.suppress(OSError):  # stderr itself gone: the exit status is all that is left to say it
        print(f"envmatrix: error: {text}", file=sys.stderr)


def _drop_stdout() -> None:
    """Point standard output at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
