"""`envmatrix run`: run the matrix on this host, record and classify every cell, print the summary."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..backends.registry import BackendOptions, choose, make_backend
from ..errors import BackendError, InputError
from ..host.gpus import HostGpus, detect_gpus
from ..outputs.report import is_current, report_paths, write_report
from ..outputs.summary import print_summary
from ..outputs.terminal import Console
from ..plan.cells import Cell
from ..plan.resolve import resolve_cells, unreachable_error
from ..records.record import Record, Status
from ..run.runner import Paths, Runner
from ..spec.matrix import Spec
from . import options
from .common import gpu_types, select_cells, take_shard, warn


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("run", help="run the matrix on this host: prepare environments, run cells, record and classify")
    options.FILE.add(p)
    options.PROFILE.add(p)
    options.add_selection(p)
    add_run_options(p)
    p.set_defaults(func=handle)


def add_run_options(p: argparse.ArgumentParser, *, reports: tuple[str | None, str] = ("reports", "reports")) -> None:
    """How a matrix runs (run, preflight --matrix): GPU type, backend, jobs, timeout, reports (default, how
    the help says it), venvs, fork, shard."""
    options.GPU.add(p, note="every GPU type of this host, each on its own GPUs")
    options.BACKEND.add(p)
    options.JOBS.add(p)
    p.add_argument("--rerun", action="store_true", help="run cells again even when their record is up to date")
    options.TIMEOUT.add(p)
    options.REPORTS.add(p, default=reports[0], note=reports[1])
    options.VENVS.add(p)
    p.add_argument(
        "--no-fork", action="store_true", help="start a fresh probe process per cell (default: a helper per environment forks each single-process cell)"
    )
    options.SHARD.add(p)
    p.add_argument("--no-resolve", action="store_true", help="skip the resolver check before building (e.g. no index reachable)")


def handle(args: argparse.Namespace) -> int:
    """Run the matrix for this host's GPU types (each on its own GPUs), record and classify every cell, print the summary."""
    gpus = detect_gpus()
    spec, profile, cells = select_cells(args, gpu=None, host=gpus)
    run_matrix(args, spec, profile, cells, gpus, Console())
    return 0


def run_matrix(args: argparse.Namespace, spec: Spec, profile: str, cells: list[Cell], gpus: HostGpus, console: Console) -> list[Record]:
    """Run the selected cells of this host's GPU types (each on its own GPUs) on the chosen backend, write the
    report, print the summary; `run` and `preflight --matrix` share it. Returns this run's records."""
    types = gpu_types(args, gpus)
    named = ", ".join(types)
    if args.shard is not None:
        cells = take_shard([c for c in cells if c.env.gpu in types], args.shard)
        console.print(f"shard {args.shard[0]}/{args.shard[1]} of GPU types {named}: {len(cells)} cells")
        if not cells:
            console.print("nothing to do in this shard (more shards than environments)")
            return []
    name, why = choose(args.backend, gpus.count)
    if args.backend == "auto":
        console.print(f"{why}: running profile '{profile}' ({named} cells) on the {name} backend")
    settings = BackendOptions(profile_name=profile, profile=spec.profiles[profile], gpu_count=gpus.count, venvs=Path(args.venvs), base=Path(args.file).parent)
    backend = make_backend(name, settings)
    backend.fork = not args.no_fork
    if not args.no_resolve and backend.name != "host":  # the host backend installs nothing
        outcome = resolve_cells([c for c in cells if c.env.gpu in types], settings.sources)
        if outcome.unreachable:
            raise unreachable_error(outcome)
        checked = {c.id: c for c in outcome.cells}
        cells = [checked.get(c.id, c) for c in cells]
    paths = Paths(Path(args.reports))
    runner = Runner(backend, paths, jobs=args.jobs, timeout=args.timeout, rerun=args.rerun, gpus=types, console=console)
    report = runner.run(cells)
    if not report.records:
        kinds = f"GPU type{'s' * (len(types) > 1)} {named}"
        raise InputError(f"no cells of {kinds} in profile '{profile}' with this selection; see envmatrix plan --profile {profile}")
    print_summary(console, report.records, results_dir=str(paths.results))
    console.print(f"GPU types run here: {report.types_text}")
    console.print(f"{report.ran} cells run, {report.cached} cached (unchanged inputs; --rerun forces), {report.other_gpus} left for other GPU types")
    if report.covered:
        console.print(f"{report.covered} cells covered: recorded with the outcome of the cell that ran for them (envmatrix plan shows which)")
    outputs = report_paths(paths.root) if is_current(paths.results, paths.root) else write_report([paths.results], paths.root, warn)
    console.print(f"report: {outputs['html']} (also {outputs['csv'].name}, {outputs['json'].name}, {outputs['vetted'].name})")
    attempted = [r for r in report.records if r.status != Status.SKIPPED]
    if attempted and all(r.status == Status.BUILD_FAILED for r in attempted):
        raise BackendError(
            f"no environment could be prepared: all {len(attempted)} cells that should run failed to build; "
            f"the build logs are in {paths.logs / 'builds'} (the report shows their tails)"
        )
    return report.records
