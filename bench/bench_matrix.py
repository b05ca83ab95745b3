"""Matrix timings side by side: venv creation with uv and with pip, a cold and a warm run of a
selection of the cpu profile, and an unchanged re-run (target: under 2 s).

    python bench/bench_matrix.py [--only PATTERN] [--skip-pip]

Cold: new venvs and no records. Warm: venvs exist, records are forced (--rerun). Unchanged: every
record is current. Figures are wall seconds of whole `envmatrix run` processes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envmatrix.backends.venv import VenvBackend
from envmatrix.plan.builds import builds
from envmatrix.plan.expand import expand
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parent.parent


def timed_run(*args: str) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "envmatrix", "run", "--profile", "cpu", *args], capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"envmatrix run failed ({proc.returncode}):\n{proc.stdout[-2000:]}")
    return time.perf_counter() - start


def venv_seconds(use_uv: bool, tmp: Path) -> float:
    build = builds(expand(load(ROOT / "matrix.yaml"), "cpu"))[0]
    backend = VenvBackend(tmp / ("uv" if use_uv else "pip"), use_uv=use_uv)
    return backend.prepare(build, tmp / "build.log").seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="*tf4.57.6*/{fp32-sdpa,ctl-zero-grad,ctl-sigfpe,ddp2}")
    parser.add_argument("--skip-pip", action="store_true", help="skip the slow pip venv (about 90 s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        print("venv creation for one environment (torch 2.13.0+cpu, transformers, peft; bytecode compiled)")
        print(f"  uv  {venv_seconds(True, tmp):7.1f} s")
        if not args.skip_pip:
            print(f"  pip {venv_seconds(False, tmp):7.1f} s")
        venvs, reports = tmp / "venvs", tmp / "reports"
        common = ("--only", args.only, "--venvs", str(venvs), "--reports", str(reports))
        cold = timed_run(*common)
        warm = timed_run(*common, "--rerun")
        unchanged = timed_run(*common)
        shutil.rmtree(reports)
        print(f"matrix selection {args.only!r} (venv backend)")
        print(f"  cold (new venvs)        {cold:7.1f} s")
        print(f"  warm (venvs exist)      {warm:7.1f} s")
        print(f"  unchanged re-run        {unchanged:7.2f} s")


if __name__ == "__main__":
    main()
