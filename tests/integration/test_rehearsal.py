"""The GPU rehearsal's fast part (tests/rehearsal.py --fast): one environment of the gpu profile built for real on
its stand-in base, a forked cell and a two-rank cell run on a simulated GPU, records, vetting, lock and the
scheduler files; what it cannot reach is said. Skipped, saying why, without an engine that takes GPU requests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import rehearsal

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / ".envmatrix" / "rehearsal-fast"  # kept between runs: the engine reuses unchanged images

pytestmark = pytest.mark.integration


def test_the_fast_rehearsal_builds_runs_and_says_what_it_could_not_reach() -> None:
    problem = rehearsal.engine_problem()
    if problem:
        pytest.skip(problem)
    if not sorted(rehearsal.CPU_TORCH_WHEELS.glob("torch-*+cpu-cp311-*.whl")):
        pytest.skip(f"no CPU torch wheel (cp311) in {rehearsal.CPU_TORCH_WHEELS}")
    done = subprocess.run([sys.executable, "tests/rehearsal.py", "--fast", "--work", str(WORK)], capture_output=True, text=True, cwd=ROOT, timeout=3000)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = json.loads((WORK / "rehearsal.json").read_text())
    (image,) = [b for b in summary["built"] if b["image"].startswith("envmatrix-probe:")]
    assert image["base"].startswith("envmatrix-standin/cuda:"), image
    assert image["python_from"] in ("distribution", "image"), image  # apt on the Debian stand-in; the image's own on the nearest Debian base
    assert image["torch"] and image["torch"].endswith("+cpu"), image  # the relabelled CPU wheel came through ENVMATRIX_TORCH_INDEX
    cells = {c["cell"].split("/")[1]: c for c in summary["cells"]}
    assert set(cells) == {"bf16-sdpa", "ddp2"} and all(c["status"] == "done" for c in cells.values()), cells
    assert all(c["launch"].startswith(("forked", "2 ranks forked")) for c in cells.values()), cells  # the fork helper, on the simulated driver
    assert all(c["class"] == "wrong_gpu" for c in cells.values()), cells  # the probe saw the CPU, not the H20 the runner offered
    assert any("submit github" in line for line in summary["checks"]) and any("submit slurm" in line for line in summary["checks"]), summary["checks"]
    assert any(line.startswith("the kernels") for line in summary["could_not_reach"]), summary["could_not_reach"]
    said = [line for line in summary["checks"] + summary["could_not_reach"] if "flash-attn from source" in line]
    assert said and ("refused before building" in said[0] or "plans no flash-attn" in said[0]), said  # no nvcc in a runtime base: refused, not built
