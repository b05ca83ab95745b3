"""Time the built-in loop on each engine against DDP: the same scenario on 2 ranks, only `parallel` differs
(fsdp2 always; zero2 and zero3 where deepspeed imports in the interpreter), median of repeated runs.

    python bench/bench_engines.py [--repeat 3] [--steps 4] [--python PATH]

One process tree per run, as the matrix runs a cell (torchrun, gloo on CPU). `setup` is what the engine
adds before training (sharding, deepspeed.initialize: on CPU DeepSpeed also loads or builds its shm comm
op there); `step` the median training step; `vs ddp` the wall-time ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from envmatrix.jsonio import read_json
from envmatrix.run.execute import probe_command, run_logged
from envmatrix.spec.matrix import Scenario
from envmatrix.verdict.runfacts import read_metrics

COLUMNS = ("import_s", "setup", "train_s", "step", "total_s", "wall")


def measure(python: str, scenario: Scenario, repeat: int) -> dict[str, float]:
    rows: dict[str, list[float]] = {k: [] for k in COLUMNS}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            done = run_logged(probe_command(python, scenario, out), out / "log", timeout=900)
            if done.exit_code != 0:
                sys.exit(f"{scenario.name}: probe failed with {done.exit_code}:\n{(out / 'log').read_text(errors='replace')[-2000:]}")
            t = (read_json(out / "result.json") or {})["timings"]
            rows["setup"].append(t["total_s"] - t["import_s"] - t["build_s"] - t["parity_s"] - t["train_s"])
            for key in ("import_s", "train_s", "total_s"):
                rows[key].append(t[key])
            rows["step"].append(statistics.median(m["step_time"] for m in read_metrics(out / "metrics.jsonl")))
            rows["wall"].append(done.seconds)
    return {k: statistics.median(v) for k, v in rows.items()}


def deepspeed_imports(python: str) -> bool:
    """Whether `python` imports deepspeed (on its CPU accelerator when there is no GPU)."""
    probe = "import os; os.environ.setdefault('DS_ACCELERATOR', 'cpu'); import deepspeed"
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--python", default=sys.executable, help="the interpreter the probe runs under (an environment with deepspeed)")
    args = parser.parse_args()
    engines = ["ddp", "fsdp2"] + (["zero2", "zero3"] if deepspeed_imports(args.python) else [])
    print(f"{'parallel':<9} " + " ".join(f"{c.removesuffix('_s'):>7}" for c in COLUMNS) + f" {'vs ddp':>7}   (median s of {args.repeat}, 2 ranks)")
    ddp_wall = None
    for parallel in engines:
        med = measure(args.python, Scenario(name=f"bench-{parallel}", world_size=2, steps=args.steps, parallel=parallel), args.repeat)
        ddp_wall = ddp_wall or med["wall"]
        print(f"{parallel:<9} " + " ".join(f"{med[c]:7.2f}" for c in COLUMNS) + f" {med['wall'] / ddp_wall:6.2f}x")
    if "zero2" not in engines:
        print(f"(zero2, zero3: deepspeed does not import in {args.python})")


if __name__ == "__main__":
    main()
