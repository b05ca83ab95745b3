"""The GPU dress rehearsal on a CPU machine: the gpu profile's images built for real with Docker, and its
cells run in containers through the fork helper on a simulated GPU, so every step but the kernels runs.

    python tests/rehearsal.py [--fast] [--gpu H20] [--envs N] [--work DIR]     (nox -s rehearse; --fast in nox -s tests)

What stands in for what a GPU runner has (and what differs) is printed with the results:
- the CUDA bases (nvidia/cuda cannot be pulled here): the same Ubuntu release made with debootstrap
  (dockerfiles/standin-rootfs.sh), with the base's CUDA_VERSION, a stand-in nvidia-smi and libcuda
  (tests/simulated.py, tests/data/fakecuda) and, for devel bases, a stand-in nvcc that compiles nothing;
  where debootstrap cannot run, the nearest Debian release (envmatrix-base:bookworm), said so;
- the NVIDIA container toolkit: a prestart hook on the engine's PATH (tests/data/standin-gpu) that accepts
  `--gpus` device requests and logs which GPUs were asked for;
- torch: the CPU torch wheel here, relabelled to each release the profile pins (tests/standin_wheels.py),
  served as PyTorch's index through ENVMATRIX_TORCH_INDEX; it is the CPU build, cp311 only, so the
  runnable environments use Python 3.11 (the profile's own Python is built up to the torch step);
- flash-attn: a stub wheel under the catalog's name whose flash_attn_2_cuda refuses to load.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.version import Version

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path[:0] = [str(ROOT), str(TESTS)]

from simulated import fake_smi  # noqa: E402
from standin_wheels import pep503, relabel_torch, stub_flash_attn  # noqa: E402

from envmatrix.facts import catalog  # noqa: E402

STANDIN_GPU = TESTS / "data" / "standin-gpu"  # the hook and nvcc
HOOK_LOG = Path("/tmp/envmatrix-standin-hook.log")  # where the stand-in hook logs (the engine runs it without our environment)
FAKECUDA = TESTS / "data" / "fakecuda" / "libcuda.c"
ROOTFS = ROOT / "dockerfiles" / "standin-rootfs.sh"
CPU_TORCH_WHEELS = Path(os.environ.get("ENVMATRIX_REHEARSAL_WHEELS", "/opt/wheels"))
SUITES = {"ubuntu22.04": "jammy", "ubuntu24.04": "noble"}  # the distribution releases nvidia/cuda builds on
NEAREST_DEBIAN = "envmatrix-base:bookworm"  # dockerfiles/debian-base.sh
RUNNABLE_PYTHON = "3.11"  # the CPU torch wheel's Python (cp311)
RUNNABLE_SUITE = "bookworm"  # ships 3.11.2 (ubuntu 22.04's 3.11 is 3.11.0~rc1; 24.04 ships none)
INDEX_PORT = 47613  # the local torch index's port (any free one; fixed so that unchanged images are reused)
DRIVER = "580.65.06"  # the simulated driver: every CUDA build in the profile runs on it
FAST_SCENARIOS = ("bf16-sdpa", "ddp2")  # one forked cell, one in a container of its own (two ranks)


@dataclass
class Rehearsal:
    """What ran, what it showed, and what could not be reached (printed at the end, written as JSON)."""

    work: Path
    built: list[dict[str, Any]] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)
    unreached: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        print(f"[rehearsal] {line}", flush=True)

    def check(self, line: str) -> None:
        self.checks.append(line)
        self.say(f"ok: {line}")

    def cannot(self, line: str) -> None:
        self.unreached.append(line)
        self.say(f"could not reach: {line}")


def docker(*args: str, input_bytes: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["docker", *args], input=input_bytes, capture_output=True, check=check)


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0


# ---- the engine and the stand-in bases -------------------------------------------------------------


def engine_problem() -> str | None:
    """Why this machine cannot rehearse at all (no engine, or no GPU device requests), or None."""
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        return "no Docker engine (start dockerd: see .ci/run)"
    if not image_exists(NEAREST_DEBIAN):
        done = subprocess.run(["bash", str(ROOT / "dockerfiles" / "debian-base.sh")], capture_output=True, text=True)
        if done.returncode != 0:
            return f"no {NEAREST_DEBIAN} and debian-base.sh failed: {done.stderr.strip()[-300:]}"
    gpus = docker("run", "--rm", "--gpus", "all", NEAREST_DEBIAN, "true", check=False)
    if gpus.returncode != 0:
        return (
            f"the engine refuses GPU device requests ({gpus.stderr.decode().strip()[-200:]}): start dockerd with "
            f"{STANDIN_GPU} on its PATH (PATH={STANDIN_GPU}:$PATH dockerd), as .ci/run does"
        )
    return None


def rootfs_tar(suite: str, cache: Path, rehearsal: Rehearsal) -> Path | None:
    """The distribution release's root file system (debootstrap, cached), or None where it cannot be made."""
    tar = cache / f"{suite}.tar"
    if tar.is_file():
        return tar
    if os.getuid() != 0 or shutil.which("debootstrap") is None:
        rehearsal.cannot(f"{suite}: debootstrap needs root and the debootstrap package here; the nearest Debian release stands in")
        return None
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["bash", str(ROOTFS), suite, str(tar)], capture_output=True, text=True)
    if done.returncode != 0:
        rehearsal.cannot(f"{suite}: debootstrap failed ({done.stderr.strip()[-200:]}); the nearest Debian release stands in")
        return None
    return tar


def standin_base(ref: str, gpu_smi_name: str, rehearsal: Rehearsal, suite: str | None = None) -> str:
    """A local image standing in for the nvidia/cuda base `ref`: its Ubuntu release (or `suite`, a Debian release),
    its CUDA_VERSION, a stand-in nvidia-smi and libcuda, and for devel bases a stand-in nvcc."""
    m = re.fullmatch(r"nvidia/cuda:(\d+\.\d+\.\d+)-(runtime|cudnn-devel)-(ubuntu\d+\.\d+)", ref)
    if m is None:
        raise SystemExit(f"rehearsal: {ref} is not an nvidia/cuda reference the rehearsal knows")
    version, flavour, system = m.groups()
    suite = suite or SUITES[system]
    tag = f"envmatrix-standin/cuda:{version}-{flavour}-{system if suite == SUITES[system] else suite}"
    if image_exists(tag):
        return tag
    os_image = f"envmatrix-standin/os:{suite}"
    if not image_exists(os_image):
        tar = rootfs_tar(suite, Path.home() / ".cache" / "envmatrix" / "standin", rehearsal)
        if tar is None:
            docker("tag", NEAREST_DEBIAN, os_image)
        else:
            with tar.open("rb") as fh:
                docker("import", "-", os_image, input_bytes=fh.read())
    folder = rehearsal.work / "bases" / tag.split(":")[1]
    folder.mkdir(parents=True, exist_ok=True)
    smi = fake_smi(folder / "bin", [(gpu_smi_name, DRIVER, 97871, "9.0")]) / "nvidia-smi"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"), str(FAKECUDA)], check=True)
    shutil.copy(smi, folder / "nvidia-smi")
    shutil.copy(STANDIN_GPU / "nvcc", folder / "nvcc")
    devel = "COPY nvcc /usr/local/cuda/bin/nvcc\nENV PATH=/usr/local/cuda/bin:$PATH\n" if flavour == "cudnn-devel" else ""
    (folder / "Dockerfile").write_text(
        f"FROM {os_image}\n"
        f"ENV CUDA_VERSION={version} NVIDIA_REQUIRE_CUDA=cuda>={version.rsplit('.', 1)[0]}\n"
        "ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility\n"
        "COPY nvidia-smi /usr/bin/nvidia-smi\nCOPY libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
        f"{devel}LABEL envmatrix.standin={ref}\n"
    )
    docker("build", "-q", "-t", tag, str(folder))
    rehearsal.say(f"stand-in base {tag} for {ref} ({suite})")
    return tag


# ---- the torch index and the wheelhouse ----------------------------------------------------------


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(folder: Path, host: str) -> tuple[http.server.ThreadingHTTPServer, str]:
    """A local HTTP index the build containers reach at the engine's bridge gateway."""
    handler = functools.partial(Quiet, directory=str(folder))
    try:  # a fixed port: the index URL is a build argument, part of the image's tag and of Docker's layer cache
        server = http.server.ThreadingHTTPServer((host, INDEX_PORT), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer((host, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def bridge_gateway() -> str:
    done = docker("network", "inspect", "bridge", "--format", "{{(index .IPAM.Config 0).Gateway}}", check=False)
    return done.stdout.decode().strip() or "172.17.0.1"


def cpu_torch_wheel() -> Path:
    found = sorted(CPU_TORCH_WHEELS.glob("torch-*+cpu-cp311-*.whl"))
    if not found:
        raise SystemExit(f"rehearsal: no CPU torch wheel (cp311) in {CPU_TORCH_WHEELS}; set ENVMATRIX_REHEARSAL_WHEELS")
    return found[-1]


# ---- the rehearsal's matrix: the gpu profile, runnable here ---------------------------------------


def rehearsal_matrix(source: Path, profile: str, python: str, bases: dict[str, str], wheelhouse: Path, out: Path) -> dict[str, Any]:
    """The gpu profile as written, with its Python set to `python`, its bases the stand-ins, and flash-attn from the wheelhouse."""
    data = yaml.safe_load(source.read_text())
    prof = dict(data["profiles"][profile])
    prof["python"] = [python]
    prof["base_images"] = bases
    prof["wheelhouse"] = str(wheelhouse)
    prof["flash_attn_sources"] = ["wheelhouse"]
    prof.pop("build_from_source", None)
    data["profiles"] = {profile: prof}
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return prof


def envmatrix(*args: str, env: dict[str, str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "envmatrix", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout)


def plan(matrix: Path, profile: str, gpu: str, env: dict[str, str]) -> dict[str, Any]:
    done = envmatrix("plan", "--file", str(matrix), "--profile", profile, "--gpu", gpu, "--format", "json", env=env)
    if done.returncode != 0:
        raise SystemExit(f"rehearsal: plan failed: {done.stderr.strip()[-800:]}")
    return dict(json.loads(done.stdout))


# ---- the run -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="one environment, two cells (a forked one and a two-rank one): nox -s tests")
    parser.add_argument("--file", type=Path, default=ROOT / "matrix.yaml")
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--gpu", default="H20", help="the simulated GPU type (the runner's)")
    parser.add_argument("--envs", type=int, default=0, help="at most this many environments (0: every one the GPU type plans)")
    parser.add_argument("--scenario", action="append", help="only these scenarios (fnmatch)")
    parser.add_argument("--work", type=Path, default=ROOT / ".envmatrix" / "rehearsal")
    args = parser.parse_args(argv)
    rehearsal = Rehearsal(args.work)
    args.work.mkdir(parents=True, exist_ok=True)
    problem = engine_problem()
    if problem:
        rehearsal.cannot(problem)
        return finish(rehearsal, fatal=True)
    gpu = catalog.GPUS[args.gpu]
    smi_name = f"NVIDIA {args.gpu}"
    if catalog.gpu_from_smi_name(smi_name) != args.gpu:
        raise SystemExit(f"rehearsal: '{smi_name}' does not map back to {args.gpu}")
    del gpu

    # the host side of a GPU runner: two simulated GPUs, the toolkit's hook, the torch index
    bin_dir = fake_smi(args.work / "host-bin", [(smi_name, DRIVER, 97871, "9.0"), (smi_name, DRIVER, 97871, "9.0")])
    shutil.copy(STANDIN_GPU / "nvidia-container-runtime-hook", bin_dir / "nvidia-container-runtime-hook")
    index_root = args.work / "torch-index"
    server, index_url = serve(index_root, bridge_gateway())
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "ENVMATRIX_TORCH_INDEX": index_url, "PYTHONPATH": str(ROOT)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        return rehearse(args, rehearsal, env, index_root, smi_name)
    finally:
        server.shutdown()


def rehearse(args: argparse.Namespace, rehearsal: Rehearsal, env: dict[str, str], index_root: Path, smi_name: str) -> int:
    original = plan(args.file, args.profile, args.gpu, env)
    envs = [e for e in original["environments"] if args.gpu in e["gpus"]]
    rehearsal.say(
        f"{args.profile} profile on {args.gpu}: {len(envs)} environments, {sum(1 for c in original['cells'] if c['status'] == 'planned')} planned cells"
    )

    # 1. the profile's own images up to the torch step: its Python from its own base's distribution (or uv)
    own = {(e["install"]["python"]["version"], e["base_image"]) for e in envs if e["base_image"]}
    for python, ref in sorted(own):
        if python == RUNNABLE_PYTHON or args.fast:  # --fast: the runnable image's own Python step is the apt check
            continue
        base = standin_base(ref, smi_name, rehearsal)
        probe_python_step(rehearsal, base, ref, python)
    if not args.fast:  # apt refuses a pre-release (jammy's 3.11.0~rc1) or a Python the release lacks: the uv path
        for ref in sorted({ref for _, ref in own})[:1]:
            for system in SUITES:
                other = ref.rsplit("-", 1)[0] + f"-{system}"
                probe_python_step(rehearsal, standin_base(other, smi_name, rehearsal), other, RUNNABLE_PYTHON)
    if any(python != RUNNABLE_PYTHON for python, _ in own):
        others = ", ".join(sorted({p for p, _ in own} - {RUNNABLE_PYTHON}))
        rehearsal.cannot(f"torch for Python {others}: the only CPU torch wheel here is cp311; those environments run with 3.11")

    # 2. the runnable rehearsal: the same environments with Python 3.11 (the CPU torch wheel's), by the distribution's
    # package on Debian 12 standing in for the CUDA base (no Ubuntu release ships a final 3.11, and uv's CPython
    # comes from GitHub, which this machine may not reach)
    cudas = sorted({e["env"]["cuda"] for e in envs})
    bases = {}
    for cuda in cudas:
        found = catalog.base_image_for(cuda, RUNNABLE_PYTHON, toolkit=False)
        if found is not None:
            bases[cuda] = standin_base(found.ref, smi_name, rehearsal, suite=RUNNABLE_SUITE)
    rehearsal.say(f"runnable copy: Python {RUNNABLE_PYTHON} by apt on Debian 12 ({RUNNABLE_SUITE}) standing in for {', '.join(sorted(bases))} bases")
    wheelhouse = args.work / "wheelhouse"
    wheelhouse.mkdir(exist_ok=True)
    matrix = args.work / "matrix.yaml"
    rehearsal_matrix(args.file, args.profile, RUNNABLE_PYTHON, bases, wheelhouse, matrix)
    runnable = plan(matrix, args.profile, args.gpu, env)
    renvs = [e for e in runnable["environments"] if args.gpu in e["gpus"]]
    if args.fast:
        # flash-attn's path first, then the torch the CPU wheel is (no relabelling), then the oldest
        own_torch = cpu_torch_wheel().name.split("-")[1].split("+")[0]
        # only where both fast scenarios are planned (an include entry may add an environment for other scenarios only)
        planned = {(c["build"], c["scenario"]) for c in runnable["cells"] if c["gpu"] == args.gpu and c["status"] == "planned"}
        renvs = [e for e in renvs if all((e["build"], s) in planned for s in FAST_SCENARIOS)]
        renvs = sorted(renvs, key=lambda e: (e["env"]["flash_attn"] == "none", e["env"]["torch"] != own_torch, Version(e["env"]["torch"])))[:1]
    elif args.envs:
        renvs = spread(renvs, args.envs)
    cpu = cpu_torch_wheel()
    for e in renvs:
        tag = "cu" + e["env"]["cuda"].replace(".", "")
        pep503(index_root, tag, [relabel_torch(cpu, e["env"]["torch"], args.work / "torch-wheels")])
        flash = e["install"]["flash_attn"]
        if flash:
            for name in flash["wheels"].values():
                stub_flash_attn(name, wheelhouse)
    scenarios = list(FAST_SCENARIOS) if args.fast else (args.scenario or ["*"])
    chosen = {e["build"] for e in renvs}
    env_ids = sorted({c["env"] for c in runnable["cells"] if c["build"] in chosen and c["gpu"] == args.gpu})
    only = [f"{env_id}/{s}" for env_id in env_ids for s in scenarios]
    reports = args.work / "reports"
    shutil.rmtree(reports, ignore_errors=True)
    cmd = ["run", "--file", str(matrix), "--profile", args.profile, "--gpu", args.gpu, "--backend", "docker", "--reports", str(reports), "--no-resolve"]
    for pattern in only:
        cmd += ["--only", pattern]
    rehearsal.say(f"envmatrix {' '.join(cmd)}")
    args.hook_seen = len(hook_lines())
    done = envmatrix(*cmd, env=env)
    (args.work / "run.log").write_text(done.stdout + done.stderr)
    rehearsal.say(f"run exited {done.returncode}; its output: {args.work / 'run.log'}")
    read_results(rehearsal, reports, renvs)
    downstream(rehearsal, args, matrix, reports, env)
    os.environ["PATH"], os.environ["ENVMATRIX_TORCH_INDEX"] = env["PATH"], env["ENVMATRIX_TORCH_INDEX"]  # the runner's, for the backend in-process
    source_builds(rehearsal, [e for e in runnable["environments"] if args.gpu in e["gpus"]], smi_name, build=not args.fast)
    return finish(rehearsal, fatal=not rehearsal.cells)


def spread(envs: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """n environments across the profile: every CUDA version and the flash-attn ones first, then the rest in order."""
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for e in envs:
        first.setdefault((e["env"]["cuda"], e["env"]["flash_attn"]), e)
    chosen = sorted(first.values(), key=lambda e: e["env"]["flash_attn"] == "none")  # stable: flash-attn's first
    chosen += [e for e in envs if e not in chosen]
    return chosen[:n]


def probe_python_step(rehearsal: Rehearsal, base: str, ref: str, python: str) -> None:
    """The probe image's Python, user and compiler steps on the profile's own base (no torch for this Python here)."""
    folder = rehearsal.work / "python-step"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(ROOT / "dockerfiles" / "steps", folder / "steps")
    ca = Path("/etc/ssl/certs/ca-certificates.crt")
    shutil.copy(ca, folder / "ca.crt")
    (folder / "Dockerfile").write_text(
        f"FROM {base}\nCOPY ca.crt /etc/envmatrix/ca.crt\nENV PIP_CERT=/etc/envmatrix/ca.crt SSL_CERT_FILE=/etc/envmatrix/ca.crt\n"
        f"COPY steps/ /opt/envmatrix/steps/\nRUN sh /opt/envmatrix/steps/python.sh {python} 1 && sh /opt/envmatrix/steps/compiler.sh 1\n"
        "RUN sh /opt/envmatrix/steps/user.sh\n"
    )
    tag = f"envmatrix-standin/python-step:{python}-{base.split(':')[1]}"
    done = subprocess.run(["docker", "build", "-t", tag, str(folder)], capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    said = [line.strip() for line in (done.stdout + done.stderr).splitlines() if "python " in line and (":" in line) and "python.sh" not in line][-2:]
    failed = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip().lower().startswith(("error", "e:", "python.sh:"))]
    said += failed[-1:]
    if done.returncode == 0:
        how = docker("run", "--rm", tag, "cat", "/opt/envmatrix-python.txt").stdout.decode().strip()
        user = docker("run", "--rm", tag, "getent", "passwd", "1000").stdout.decode().strip().split(":")[0]
        rehearsal.check(f"Python {python} on {ref}'s stand-in: by {how}; uid 1000 = {user}; gcc and Python.h in")
        rehearsal.built.append({"image": tag, "base": ref, "python": python, "python_from": how, "steps": "python, compiler, user (no torch)"})
    else:
        rehearsal.cannot(f"Python {python} on {ref}'s stand-in: {' | '.join(said) or (done.stdout + done.stderr)[-300:]}")


def read_results(rehearsal: Rehearsal, reports: Path, envs: list[dict[str, Any]]) -> None:
    for path in sorted((reports / "results").glob("*.json")):
        record = json.loads(path.read_text())
        build = (record.get("environment") or {}).get("build") or {}
        outcome = record.get("outcome") or {}
        rehearsal.cells.append(
            {
                "cell": record.get("cell", {}).get("id") or path.stem,
                "status": record.get("status"),
                "class": outcome.get("class"),
                "summary": str(outcome.get("summary") or outcome.get("reason") or "")[:200],
                "launch": record.get("launch"),
            }
        )
        if build.get("image") and not any(b.get("image") == build["image"] for b in rehearsal.built):
            rehearsal.built.append(
                {
                    "image": build["image"],
                    "base": build.get("base_image"),
                    "python_from": build.get("python_from"),
                    "torch": next((p for p in build.get("freeze", []) if p.startswith("torch==")), None),
                    "flash_attn": build.get("flash_attn"),
                }
            )
    for cell in rehearsal.cells:
        rehearsal.say(f"cell {cell['cell']}: {cell['status']} {cell['class']} ({cell['launch']}) {cell['summary']}")
    if not rehearsal.cells:
        rehearsal.cannot("no cell records were written (see run.log)")


def source_builds(rehearsal: Rehearsal, envs: list[dict[str, Any]], smi_name: str, *, build: bool) -> None:
    """flash-attn from source (flash_attn_sources: sdist): refused before the build on a runtime base (no nvcc); on a
    devel base (with `build`) the image builds up to nvcc, whose stand-in compiles nothing, so the build stops there."""
    from envmatrix.backends import BuildFailed
    from envmatrix.backends.docker import DockerBackend
    from envmatrix.host.pipconfig import read_pip_settings
    from envmatrix.plan.builds import Build
    from envmatrix.plan.cells import Environment
    from envmatrix.plan.install import Sources

    flash = next((e for e in envs if e["env"]["flash_attn"] != "none"), None)
    if flash is None:
        rehearsal.cannot("flash-attn from source: the profile plans no flash-attn environment on this GPU type")
        return
    e = flash["env"]
    env = Environment(e["cuda"], e["torch"], e["transformers"], e["flash_attn"], "H20", RUNNABLE_PYTHON, tuple(sorted(e["packages"].items())))
    found = catalog.base_image_for(env.cuda, env.python, toolkit=True)
    assert found is not None
    for ref in [found.ref.replace("cudnn-devel", "runtime"), *([found.ref] if build else [])]:
        base = standin_base(ref, smi_name, rehearsal, suite=RUNNABLE_SUITE)
        sources = Sources(read_pip_settings(), flash_attn=("sdist",), build_from_source=True, base_images={env.cuda: base})
        log = rehearsal.work / f"source-build-{ref.split('-')[1]}.log"
        try:
            DockerBackend(sources=sources).prepare(Build(env.build_id, env, ()), log)
            rehearsal.cannot(f"flash-attn {env.flash_attn} from source on {base}: it built, with a stand-in nvcc?")
        except BuildFailed as exc:
            said = str(exc)
            if "runtime" in ref and "refused before building" in said:
                rehearsal.check(f"flash-attn from source on a runtime base: {said[:300]}")
            elif any(mark in (text := log.read_text(errors="replace")) for mark in ("nvcc (envmatrix stand-in)", "CUDA_HOME environment variable is not set")):
                where = "nvcc's stand-in" if "nvcc (envmatrix stand-in)" in text else "torch's CUDA_HOME, None in a CPU build"
                rehearsal.check(f"flash-attn from source on {base}: build requirements installed, setup.py run without isolation; stopped at {where} ({log})")
                rehearsal.cannot("compiling flash-attn (a CUDA build of torch, a real nvcc and toolkit)")
            else:
                rehearsal.cannot(f"flash-attn from source on {base}: {said[:300]} ({log})")


def hook_lines() -> list[str]:
    """What the stand-in hook has logged on this machine (every engine user's requests: the rehearsal counts its own)."""
    return HOOK_LOG.read_text().splitlines() if HOOK_LOG.is_file() else []


def downstream(rehearsal: Rehearsal, args: argparse.Namespace, matrix: Path, reports: Path, env: dict[str, str]) -> None:
    """Vetting and lock on the records; the three scheduler files rendered from the real matrix file."""
    asked = [line for line in hook_lines()[args.hook_seen :] if "GPU-" in line]
    if asked:
        rehearsal.check(f"the engine ran the toolkit's (stand-in) hook for {len(asked)} GPU device requests, the last: {asked[-1]}")
    else:
        rehearsal.cannot("the toolkit's (stand-in) hook logged no GPU device request during the run (an engine started without it on its PATH?)")
    vetted = reports / "vetted.json"
    if vetted.is_file():
        rehearsal.check(f"vetting ran on the records: {vetted} ({len(vetted.read_text())} bytes)")
    lock = envmatrix("lock", "--best", args.gpu, "--results", str(reports / "results"), "--out", str(args.work / "lock"), env=env)
    text = " | ".join((lock.stdout + lock.stderr).strip().splitlines()[-2:])[:400]
    if lock.returncode == 0:
        rehearsal.check(f"lock --best {args.gpu}: {text}")
    else:  # with a CPU torch no GPU cell is ok, so nothing is vetted: lock's refusal runs, the lock itself cannot
        rehearsal.cannot(f"a lock of a vetted environment (no cell can be ok without a GPU); lock --best {args.gpu} exit {lock.returncode}: {text}")
    for target in ("github", "slurm", "k8s"):
        done = envmatrix("submit", target, "--file", str(args.file), "--profile", args.profile, "--dry-run", env=env)
        out = args.work / f"submit-{target}.txt"
        out.write_text(done.stdout + done.stderr)
        (rehearsal.check if done.returncode == 0 else rehearsal.cannot)(
            f"submit {target} --dry-run from {args.file.name} (exit {done.returncode}): {len(done.stdout.splitlines())} lines in {out}"
        )
    rehearsal.cannot("the kernels: torch here is the CPU build, so no cell touches a GPU (CUDA, NCCL, flash-attn's kernels, vLLM)")


def finish(rehearsal: Rehearsal, *, fatal: bool) -> int:
    summary = {"built": rehearsal.built, "cells": rehearsal.cells, "checks": rehearsal.checks, "could_not_reach": rehearsal.unreached}
    (rehearsal.work / "rehearsal.json").write_text(json.dumps(summary, indent=2))
    print("\n== rehearsal ==")
    print(f"images built: {len(rehearsal.built)}")
    for b in rehearsal.built:
        print(f"  {b.get('image')}  base {b.get('base')}  python {b.get('python_from')}  {b.get('torch') or ''}")
    classes: dict[str, int] = {}
    for c in rehearsal.cells:
        key = f"{c['status']}/{c['class']}"
        classes[key] = classes.get(key, 0) + 1
    print(f"cells run: {len(rehearsal.cells)} {classes}")
    print("could not reach:")
    for line in rehearsal.unreached:
        print(f"  - {line}")
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
