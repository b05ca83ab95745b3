"""Matrix timings from the records of real runs: wall time against the work it holds and the critical path.

    python bench/bench_matrix.py [--profile cpu] [--only PATTERN] [--jobs N]   # a cold run, then a warm one
    python bench/bench_matrix.py --records REPORTS --wall SECONDS [--cpu S]   # figures of a run made elsewhere

Cold: new venvs and no records (uv's own cache as this user has it: say which when quoting figures).
Warm: the venvs exist, every cell runs again (--rerun). For each: the wall seconds of the whole `envmatrix run`;
the work, the sum of every environment's preparation and every cell's probe seconds (what one slot would take
end to end); the critical path, the longest preparation + cell chain (no schedule can beat it); and
wall/work (1.0: nothing overlapped; the issue's target is <= 0.6) and wall/critical path. The records' work
leaves out what no record holds (each fork helper's imports, where the environment's bytecode is now written;
resolving; the report), so the CPU seconds of every process the run started are printed beside it (for a run
made elsewhere: `--cpu`, from /usr/bin/time), with wall / (cpu / cores): 1.0 keeps every core busy. Figures
are from the records each run wrote, so they say what happened, machine load included: quote `uptime` beside them.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from envmatrix.records.record import Record, Status, load_records

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Figures:
    """What a run's records say about its time."""

    cells: int
    environments: int
    prepare_s: float  # preparation seconds, environments prepared this run
    probe_s: float  # probe seconds, cells run this run
    critical_s: float  # the longest preparation + cell chain

    @property
    def work_s(self) -> float:
        return self.prepare_s + self.probe_s


def figures(records: list[Record]) -> Figures:
    """Work and critical path from records: each environment's preparation once (where it was not reused),
    each cell's probe seconds; the chain is an environment's preparation then its longest cell."""
    ran = [r for r in records if r.status == Status.DONE and r.timings.probe_s is not None]
    prepare: dict[str, float] = {}
    longest: dict[str, float] = {}
    for r in ran:
        if not r.timings.prepare_reused and r.timings.prepare_s is not None:
            prepare[r.cell.build] = max(prepare.get(r.cell.build, 0.0), r.timings.prepare_s)
        longest[r.cell.build] = max(longest.get(r.cell.build, 0.0), r.timings.probe_s or 0.0)
    critical = max((prepare.get(b, 0.0) + s for b, s in longest.items()), default=0.0)
    return Figures(len(ran), len(longest), sum(prepare.values()), sum(r.timings.probe_s or 0.0 for r in ran), critical)


def show(label: str, wall: float, f: Figures) -> None:
    print(f"{label}: {f.cells} cells run over {f.environments} environments")
    print(f"  wall                 {wall:8.1f} s")
    print(f"  work (prepare+probe) {f.work_s:8.1f} s  ({f.prepare_s:.1f} + {f.probe_s:.1f})")
    print(f"  critical path        {f.critical_s:8.1f} s")
    if f.work_s:
        print(f"  wall / work          {wall / f.work_s:8.2f}")
    if f.critical_s:
        print(f"  wall / critical path {wall / f.critical_s:8.2f}")


def timed_run(args: list[str]) -> tuple[float, float]:
    """Wall seconds and the CPU seconds of every process the run started (user + system, children reaped): the
    records' work leaves out what no record holds (each fork helper's imports, resolving, the report)."""
    start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "envmatrix", "run", *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"envmatrix run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.perf_counter() - start, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def show_cpu(wall: float, cpu: float) -> None:
    cores = os.cpu_count() or 1
    print(f"  cpu, every process   {cpu:8.1f} s  (wall / (cpu / {cores} cores) {wall / (cpu / cores):.2f}: 1.0 keeps every core busy)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN", help="a selection of the profile (default: all of it)")
    parser.add_argument("--jobs", help="cells at once (default: envmatrix's, what the host carries)")
    parser.add_argument("--records", type=Path, help="figures of an existing run: its reports folder (with --wall)")
    parser.add_argument("--wall", type=float, help="that run's wall seconds")
    parser.add_argument("--cpu", type=float, help="that run's CPU seconds, user + system (/usr/bin/time's %%U + %%S)")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min) on {os.cpu_count()} cores")
    if args.records is not None:
        if args.wall is None:
            parser.error("--records needs --wall SECONDS")
        show(f"run in {args.records}", args.wall, figures(load_records(args.records / "results")))
        if args.cpu:
            show_cpu(args.wall, args.cpu)
        return
    uv_cache = os.environ.get("UV_CACHE_DIR", "uv's default (the user's)")
    print(f"uv cache: {uv_cache}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        venvs, reports = tmp / "venvs", tmp / "reports"
        common = ["--profile", args.profile, "--venvs", str(venvs), "--reports", str(reports), *(f"--only={p}" for p in args.only)]
        common += ["--jobs", args.jobs] if args.jobs else []
        cold, cold_cpu = timed_run(common)
        show("cold (new venvs, no records)", cold, figures(load_records(reports / "results")))
        show_cpu(cold, cold_cpu)
        shutil.rmtree(reports)
        warm, warm_cpu = timed_run([*common, "--rerun"])
        show("warm (venvs exist, every cell again)", warm, figures(load_records(reports / "results")))
        show_cpu(warm, warm_cpu)


if __name__ == "__main__":
    main()
