"""The fork helper against a process per cell, in one run: the matrix's wall time both ways (alternating
pairs, venvs ready), each forked cell's wall time against the probe's in-process work (result.json's
total_s), and whether the records agree apart from timings and pids.

    python bench/bench_fork.py [--only PATTERN] [--pairs 1] [--backend venv] [--jobs 1] [--keep DIR]

Figures are wall seconds of whole `envmatrix run --rerun` processes. On a machine shared with others,
read the pairs, not one figure: each pair runs both modes back to back, in alternating order.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: What differs between two runs of the same cell whatever runs it: clocks, pids, progress-bar rates,
#: where the reports are.
VOLATILE_TEXT = re.compile(r'("step_time": |finished in |finish in |(?:PID|pid) |\[\d\d:\d\d<\d\d:\d\d, |\[[WEI]\d{4} )-?[0-9][0-9.:e+ -]*(?:it/s|s/it)?')
VOLATILE_KEYS = {"started", "finished", "timings", "pid", "step_time", "launch"}  # launch: how it started, by design
#: The log's line saying why the helper did not fork a cell: like `launch`, how it was started, by design.
FALLBACK_NOTE = re.compile(r"\n*\[envmatrix\] fork helper not used for this cell: .*?; it ran in a process of its own\n", re.S)
#: In a multi-rank log the ranks' lines interleave in whatever order the scheduler gave them (two torchrun
#: runs of one cell differ already), and the launcher's own lines differ by design (torchrun's banner
#: and ChildFailedError report, the helper's "[envmatrix] ranks" lines). What the ranks said is compared:
#: their "[rankN]" lines and their distinct exception lines, each as a sorted list.
RANK_START = re.compile(r"(?=\[rank\d+\][ :])")  # unbuffered ranks (torchrun's `python -u`) can even share a line
EXCEPTION_LINE = re.compile(r"^(?!torch\.distributed\.elastic)[A-Za-z_][\w.]*(?:Error|Exception): .*$", re.M)
EVIDENCE_AT = re.compile(r"^line \d+: ")


def comparable(record: dict[str, Any], root: Path) -> dict[str, Any]:
    """A record without what legitimately differs between two runs: timings, pids, clocks, where the
    reports folder is, and for a multi-rank cell the order of its ranks' lines. Two runs of the same
    cell, forked or not, must agree on everything else."""

    def scrub(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: scrub(v) for k, v in value.items() if k not in VOLATILE_KEYS}
        if isinstance(value, list):
            return [scrub(v) for v in value]
        if isinstance(value, str):
            return VOLATILE_TEXT.sub(r"\1<v>", FALLBACK_NOTE.sub("\n", value.replace(str(root), "<reports>")))
        return value

    scrubbed: dict[str, Any] = scrub(record)
    if ((record.get("cell") or {}).get("scenario_settings") or {}).get("world_size", 1) > 1:
        log, outcome = scrubbed.get("log") or {}, scrubbed.get("outcome") or {}
        tail = str(log.get("tail", ""))
        said = [piece.rstrip() for line in tail.splitlines() for piece in RANK_START.split(line) if piece.startswith("[rank")]
        log["tail"] = sorted(said) + sorted(set(EXCEPTION_LINE.findall(tail)))
        outcome["evidence"] = EVIDENCE_AT.sub("line <n>: ", str(outcome.get("evidence", "")))
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
    from envmatrix.plan.builds import builds
    from envmatrix.plan.expand import expand
    from envmatrix.spec.matrix import load as load_spec

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
    parser.add_argument("--keep", type=Path, help="copy both runs' reports here (to read the records)")
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
        print(f"\n{'cell (with helper, last pair)':<66} {'launch':<15} {'wall':>6} {'work':>6} {'ratio':>6} {'no-fork wall':>13}")
        ratios: dict[bool, list[float]] = {False: [], True: []}
        for cell_id, rec in sorted(forked.items()):
            if rec.get("status") != "done":
                continue
            wall, work = (rec.get("timings") or {}).get("probe_s"), ((rec.get("result") or {}).get("timings") or {}).get("total_s")
            ddp = rec["cell"]["scenario_settings"]["world_size"] > 1
            other = (plain.get(cell_id, {}).get("timings") or {}).get("probe_s") or 0.0
            if wall is None or not work:
                print(f"{cell_id:<66} {rec.get('launch', '')[:15]:<15} {'-':>6}")
                continue
            ratios[ddp].append(wall / work)
            print(f"{cell_id:<66} {rec.get('launch', '')[:15]:<15} {wall:6.2f} {work:6.2f} {wall / work:6.2f} {other:13.2f}")
        for ddp, label in ((False, "single-process cells"), (True, "multi-rank cells")):
            if ratios[ddp]:
                mid, top = statistics.median(ratios[ddp]), max(ratios[ddp])
                print(f"{label}: wall / in-process work median {mid:.2f}, max {top:.2f}" + ("" if ddp else " (target <= 1.3)"))

        same = differ = 0
        for cell_id, rec in sorted(forked.items()):
            if cell_id not in plain or rec.get("status") != "done":
                continue
            diffs = differences(comparable(rec, tmp / "fork"), comparable(plain[cell_id], tmp / "nofork"))
            if diffs:
                differ += 1
                print(f"records differ: {cell_id}: " + "; ".join(diffs[:3]))
            else:
                same += 1
        print(f"records identical apart from timings and pids: {same} of {same + differ} cells run")
        if args.keep:
            shutil.copytree(tmp, args.keep, dirs_exist_ok=True)
            print(f"reports kept in {args.keep}")


if __name__ == "__main__":
    main()
