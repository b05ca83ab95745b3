"""The fork helper against a process per cell, in one run: the matrix's wall time both ways (alternating
pairs, venvs ready), each forked cell's wall time against the probe's in-process work (result.json's
total_s), and whether the records agree apart from timings and pids.

    python bench/bench_fork.py [--only PATTERN] [--pairs 1] [--backend venv] [--jobs 1]

Figures are wall seconds of whole `envmatrix run --rerun` processes. On a machine shared with others,
read the pairs, not one figure: each pair runs both modes back to back, in alternating order.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: What differs between two runs of the same cell whatever runs it: clocks, pids, where the reports are.
VOLATILE_TEXT = re.compile(r'("step_time": |finished in |finish in |(?:PID|pid) )-?[0-9][0-9.e+-]*')
VOLATILE_KEYS = {"started", "finished", "timings", "pid", "step_time", "launch"}  # launch: how it started, by design


def comparable(record: dict[str, Any], root: Path) -> dict[str, Any]:
    """A record without what legitimately differs between two runs: timings, pids, clocks, where the
    reports folder is. Two runs of the same cell, forked or not, must agree on everything else."""

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items() if k not in VOLATILE_KEYS}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, str):
            return VOLATILE_TEXT.sub(r"\1<v>", value.replace(str(root), "<reports>"))
        return value

    scrubbed: dict[str, Any] = scrub(record)
    return scrubbed


def differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Paths where two JSON values differ (first few)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{where}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{where}[{i}]")]
    same = a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)  # NaN is NaN here
    return [] if same else [f"{where}: {str(a)[:80]!r} != {str(b)[:80]!r}"]


def load(reports: Path) -> dict[str, dict[str, Any]]:
    return {r["cell"]["id"]: r for r in (json.loads(p.read_text()) for p in sorted((reports / "results").glob("*.json")))}


def timed_run(reports: Path, args: argparse.Namespace, fork: bool) -> float:
    cmd = [sys.executable, "-m", "envmatrix", "run", "--profile", "cpu", "--backend", args.backend, "--rerun", "--jobs", str(args.jobs)]
    cmd += ["--venvs", str(args.venvs), "--reports", str(reports), "--timeout", "900"]
    cmd += [x for pattern in args.only for x in ("--only", pattern)]
    if not fork:
        cmd.append("--no-fork")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"envmatrix run failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return time.perf_counter() - start


def prepare(args: argparse.Namespace, tmp: Path) -> float:
    """Make every environment of the selection (venvs or images), so the timed runs only run cells."""
    from envmatrix.backends.docker import DockerBackend
    from envmatrix.backends.venv import VenvBackend
    from envmatrix.cells import expand
    from envmatrix.plan import builds
    from envmatrix.spec import load as load_spec

    start = time.perf_counter()
    backend = VenvBackend(args.venvs) if args.backend == "venv" else DockerBackend()
    for build in builds(expand(load_spec(ROOT / "matrix.yaml"), "cpu", only=args.only)):
        backend.prepare(build, tmp / "build.log")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", action="append", default=[], help="cell patterns (default: the whole cpu profile)")
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--backend", default="venv", choices=("venv", "docker"))
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--venvs", type=Path, default=ROOT / ".envmatrix" / "venvs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        print(f"preparing environments (not timed): {prepare(args, tmp):.1f} s")
        walls: dict[bool, list[float]] = {True: [], False: []}
        for i in range(args.pairs):
            for fork in (True, False) if i % 2 == 0 else (False, True):
                walls[fork].append(timed_run(tmp / ("fork" if fork else "nofork"), args, fork))
            print(f"pair {i + 1}: with helper {walls[True][-1]:7.1f} s   --no-fork {walls[False][-1]:7.1f} s   ratio {walls[False][-1] / walls[True][-1]:.2f}x")
        med = {k: statistics.median(v) for k, v in walls.items()}
        where = f"{args.backend}, --jobs {args.jobs}, {args.only or 'whole cpu profile'}"
        print(f"matrix ({where}): median with helper {med[True]:.1f} s, --no-fork {med[False]:.1f} s: {med[False] / med[True]:.2f}x faster")

        forked, plain = load(tmp / "fork"), load(tmp / "nofork")
        print(f"\n{'cell (forked, last pair)':<62} {'wall':>7} {'work':>7} {'ratio':>6}   {'no-fork wall':>12}")
        ratios = []
        for cell_id, rec in sorted(forked.items()):
            wall, work = (rec.get("timings") or {}).get("probe_s"), ((rec.get("result") or {}).get("timings") or {}).get("total_s")
            ddp = rec["cell"]["scenario_settings"]["world_size"] > 1
            other = (plain.get(cell_id, {}).get("timings") or {}).get("probe_s")
            if wall is None or not work:
                print(f"{cell_id:<62} {'-':>7}")
                continue
            if not ddp:
                ratios.append(wall / work)
            print(f"{cell_id:<62} {wall:7.2f} {work:7.2f} {wall / work:6.2f}{' (DDP: torchrun)' if ddp else ''}   {other or 0:12.2f}")
        if ratios:
            print(f"single-process cells: wall / in-process work median {statistics.median(ratios):.2f}, max {max(ratios):.2f} (target <= 1.3)")

        same = differ = 0
        for cell_id, rec in sorted(forked.items()):
            if cell_id not in plain:
                continue
            diffs = differences(comparable(rec, tmp / "fork"), comparable(plain[cell_id], tmp / "nofork"))
            if diffs:
                differ += 1
                print(f"records differ: {cell_id}: " + "; ".join(diffs[:3]))
            else:
                same += 1
        print(f"records identical apart from timings and pids: {same} of {same + differ}")


if __name__ == "__main__":
    main()
