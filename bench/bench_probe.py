"""Time the probe: import, build, per-step, parity and total seconds, median of repeated runs.

    python bench/bench_probe.py [--repeat 3] [--scenario fp32-sdpa --scenario ddp2]

Runs in the current interpreter (it needs torch and transformers), one process per run, as the
matrix runs it. `wall` includes interpreter start-up and, for DDP, torchrun.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from envmatrix.execute import probe_command, run_logged
from envmatrix.jsonio import read_json
from envmatrix.runfacts import read_metrics
from envmatrix.spec import load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scenario", action="append", default=None)
    args = parser.parse_args()
    spec = load(Path(__file__).resolve().parent.parent / "matrix.yaml")
    print(f"{'scenario':<12} {'import':>7} {'build':>7} {'parity':>7} {'step':>7} {'total':>7} {'wall':>7}   (median s of {args.repeat})")
    for name in args.scenario or ["fp32-sdpa", "ddp2"]:
        rows: dict[str, list[float]] = {k: [] for k in ("import_s", "build_s", "parity_s", "step", "total_s", "wall")}
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp)
                done = run_logged(probe_command(sys.executable, spec.scenarios[name], out), out / "log", timeout=300)
                result = read_json(out / "result.json") or {}
                if done.exit_code != 0:
                    sys.exit(f"{name}: probe failed with {done.exit_code}; see a run by hand")
                timings = result["timings"]
                for key in ("import_s", "build_s", "parity_s", "total_s"):
                    rows[key].append(timings[key])
                rows["step"].append(statistics.median(m["step_time"] for m in read_metrics(out / "metrics.jsonl")))
                rows["wall"].append(done.seconds)
        med = {k: statistics.median(v) for k, v in rows.items()}
        print(f"{name:<12} {med['import_s']:7.2f} {med['build_s']:7.2f} {med['parity_s']:7.2f} {med['step']:7.3f} {med['total_s']:7.2f} {med['wall']:7.2f}")


if __name__ == "__main__":
    main()
