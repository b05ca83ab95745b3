"""Time the probe per scenario and model family: in-process stages (import, build, parity, kernels, step,
total) and the wall time of the whole process, median of repeated runs.

    python bench/bench_probe.py [--repeat 3] [--scenario fp32-sdpa --scenario vlm-sdpa]

Runs in the current interpreter (it needs torch and transformers), one process per run, as the
matrix runs it. `wall` includes interpreter start-up and, for DDP, torchrun; `work` is the probe's own
total minus its imports (what a forked per-environment helper would still pay per cell).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from envmatrix.jsonio import read_json
from envmatrix.run.execute import probe_command, run_logged
from envmatrix.spec.matrix import load
from envmatrix.verdict.runfacts import read_metrics

#: one scenario per built-in family, plus the kernel stage and DDP
DEFAULT = ["fp32-sdpa", "llama-sdpa", "gemma2-eager", "vlm-sdpa", "gen-config-kwargs", "kernels-7b", "ddp2"]
COLUMNS = ("import_s", "build_s", "parity_s", "kernels_s", "step", "total_s", "work", "wall")


def measure(name: str, repeat: int) -> dict[str, float]:
    spec = load(Path(__file__).resolve().parent.parent / "matrix.yaml")
    rows: dict[str, list[float]] = {k: [] for k in COLUMNS}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            done = run_logged(probe_command(sys.executable, spec.scenarios[name], out), out / "log", timeout=600)
            result = read_json(out / "result.json") or {}
            if done.exit_code != 0:
                sys.exit(f"{name}: probe failed with {done.exit_code}; see a run by hand")
            timings = result["timings"]
            for key in ("import_s", "build_s", "parity_s", "total_s"):
                rows[key].append(timings[key])
            rows["kernels_s"].append(timings.get("kernels_s", 0.0))
            rows["step"].append(statistics.median(m["step_time"] for m in read_metrics(out / "metrics.jsonl")))
            rows["work"].append(timings["total_s"] - timings["import_s"])
            rows["wall"].append(done.seconds)
    return {k: statistics.median(v) for k, v in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scenario", action="append", default=None)
    args = parser.parse_args()
    spec = load(Path(__file__).resolve().parent.parent / "matrix.yaml")
    print(f"{'scenario':<18} {'model':<11} " + " ".join(f"{c.removesuffix('_s'):>7}" for c in COLUMNS) + f"   (median s of {args.repeat})")
    for name in args.scenario or DEFAULT:
        med = measure(name, args.repeat)
        print(f"{name:<18} {spec.scenarios[name].model:<11} " + " ".join(f"{med[c]:7.2f}" for c in COLUMNS))


if __name__ == "__main__":
    main()
