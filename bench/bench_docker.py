"""Docker backend timings: a first environment's image built cold, a second that differs only in
transformers (its torch layer must come from the cache), and the per-cell container overhead against
the venv backend.

    python bench/bench_docker.py [--repeat 3] [--keep-images]

Needs a Docker engine and envmatrix-base:bookworm (dockerfiles/debian-base.sh). Removes envmatrix's
probe images first so the first build is cold (the base image stays).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envmatrix.backends.docker import DockerBackend
from envmatrix.backends.venv import VenvBackend
from envmatrix.plan.builds import builds
from envmatrix.plan.expand import expand
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep-images", action="store_true", help="do not remove probe images first (warm figures)")
    args = parser.parse_args()
    spec = load(ROOT / "matrix.yaml")
    first, second = builds(expand(spec, "cpu", only=["*tf4.51.3*", "*tf4.57.6*"]))[:2]
    docker = DockerBackend()
    if not args.keep_images:
        for image in docker.client.images.list(name="envmatrix-probe"):
            docker.client.images.remove(image.id, force=True)
        docker.client.images.prune(filters={"dangling": True})
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        t = time.perf_counter()
        ready = docker.prepare(first, tmp / "first.log")
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        docker.prepare(second, tmp / "second.log")
        second_s = time.perf_counter() - t
        log = (tmp / "second.log").read_text()
        torch_step = log.split("RUN pip install ${TORCH_INDEX_URL", 1)[-1].split("Step ", 1)[0]
        print(f"image build, first environment ({first.build_id}):  {first_s:6.1f} s")
        print(f"image build, second, transformers only ({second.build_id}): {second_s:6.1f} s")
        print(f"  torch layer reused from cache: {'Using cache' in torch_step}")
        scenario = spec.scenarios["fp32-sdpa"]
        venv = VenvBackend(ROOT / ".envmatrix" / "venvs")
        venv_ready = venv.prepare(first, tmp / "venv.log")
        rows: dict[str, list[float]] = {"docker": [], "venv": []}
        for i in range(args.repeat):
            for name, backend, prepared in (("docker", docker, ready), ("venv", venv, venv_ready)):
                done = backend.run(prepared, scenario, tmp / f"{name}{i}", tmp / f"{name}{i}.log", timeout=300, gpu_ids=[])
                if done.exit_code != 0:
                    sys.exit(f"{name} cell failed ({done.exit_code}); see {tmp / f'{name}{i}.log'}")
                rows[name].append(done.seconds)
        d, v = statistics.median(rows["docker"]), statistics.median(rows["venv"])
        print(f"cell fp32-sdpa, median of {args.repeat}: docker {d:5.2f} s, venv {v:5.2f} s, container overhead {d - v:+5.2f} s")
    subprocess.run(["docker", "image", "ls", "envmatrix-probe"], check=False)


if __name__ == "__main__":
    main()
