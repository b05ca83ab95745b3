"""One virtualenv per environment, shared by all its scenarios: uv when present, pip otherwise.

uv is ~10x faster and hardlinks from its cache, but it does not read pip's configuration, so pip's
index settings are handed to it explicitly (mirrors and wheelhouses keep working). Bytecode is not
compiled at install time (uv took 19 s an environment for 7,900 files, most never imported): the
cells write it for what they import, into the environment's own folder, so the fork helper's first
import pays it once (5 s) and every later import of that environment reads it (a user's
PYTHONDONTWRITEBYTECODE would make every cell's imports 2-3x slower, so the cells do not inherit it).
torch is pinned exactly, and a CUDA build is never installed on a machine without a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from probes import caches

from ..facts import elfarch, flashsource
from ..host.gpus import detect_gpus
from ..host.pipconfig import find_uv, read_pip_settings
from ..jsonio import read_json
from ..plan.builds import Build
from ..plan.cells import Environment
from ..plan.install import InstallSet, Sources, install_set
from ..run.execute import PROBE
from ..run.locking import exclusive
from . import BuildFailed, Prepared, ProcessBackend

MARKER = ".envmatrix.json"
CACHES = ".caches"  # the environment's cache root, inside its venv (rebuilt with it)
SHARED_OPS = ".shared-ops"  # beside the venvs: compiled ops shared by environments that may share them
STEP_TIMEOUT_S = 3600
OPS_TIMEOUT_S = 900  # DeepSpeed's CPU all-reduce compiles in about a minute on 2 cores


class VenvBackend(ProcessBackend):
    """Virtualenvs under `root/<build id>`, reused while their inputs are unchanged."""

    name = "venv"

    def __init__(self, root: Path, *, use_uv: bool | None = None, sources: Sources | None = None) -> None:
        self.root = root
        self.uv = find_uv() if use_uv is not False else None
        if use_uv and self.uv is None:
            raise BuildFailed("uv was asked for but is not installed (python3 -m pip install uv)")
        self.sources = sources or Sources(read_pip_settings())
        self.settings = self.sources.pip

    def install_set(self, env: Environment) -> InstallSet:
        """What this environment installs (plan/install.py owns it)."""
        return install_set(env, self.sources)

    def requirements(self, env: Environment) -> list[str]:
        """Everything but flash-attn, which needs torch installed first to pick its wheel: requirements, then torch's source."""
        wanted = self.install_set(env)
        return [*wanted.requirements, *wanted.source_flags]

    def inputs_key(self, env: Environment) -> str:
        """What the venv is a function of; a change rebuilds it."""
        payload: dict[str, object] = {"env": env.axes(), "reqs": self.requirements(env), "tool": "uv" if self.uv else "pip"}
        wanted = self.install_set(env)
        if wanted.build_env or wanted.excludes:
            payload.update(build_env=dict(wanted.build_env), excludes=list(wanted.excludes))
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]

    def prepare(self, build: Build, log: Path) -> Prepared:
        env = build.env
        if env.cuda != "none" and detect_gpus().count == 0:
            raise BuildFailed(f"{build.build_id}: refusing to install a CUDA build of torch on a machine without a GPU")
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / build.build_id
        python = target / "bin" / "python"
        key = self.inputs_key(env)
        with exclusive(self.root / f".{build.build_id}.lock"):
            marker = read_json(target / MARKER)
            if marker and marker.get("inputs") == key and python.exists():
                return Prepared(str(python), 0.0, True, facts=marker, env=_cell_env(target, env))
            start = time.monotonic()
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("wb") as out:
                shutil.rmtree(target, ignore_errors=True)
                self._create(env, target, out)
                self._install(env, python, out)
                flash = self._install_flash(env, python, out) if env.flash_attn != "none" else None
                freeze = self._freeze(python, out)
                self._build_ops(env, python, target, out)
            facts: dict[str, object] = {
                "inputs": key,
                "tool": "uv" if self.uv else "pip",
                "requirements": self.requirements(env),
                "freeze": freeze,
                "seconds": round(time.monotonic() - start, 2),
                "index_url": self.settings.index_url,
                "extra_index_urls": list(self.settings.extra_index_urls),
                "find_links": list(self.settings.find_links),
                "flash_attn": flash,
            }
            (target / MARKER).write_text(json.dumps(facts, indent=2))
            return Prepared(str(python), float(str(facts["seconds"])), False, facts=facts, env=_cell_env(target, env))

    def _build_ops(self, env: Environment, python: Path, target: Path, out: IO[bytes]) -> None:
        """DeepSpeed's ops compiled at first use (on CPU its shared-memory all-reduce, about a minute), built here, while
        the environment is prepared beside other environments' cells, into the shared folder its cells load from:
        else a cell builds it, and the other cells of its environment wait on the lock holding their slots. A failure
        is the cells' to meet (DeepSpeed then does what it would), so it is logged, not raised."""
        if env.package("deepspeed") == "none" or env.cuda != "none":
            return
        code = "from probes import engines; engines.use_deepspeed_on('cpu')"
        run_env = {**_cell_env(target, env), "PYTHONPATH": str(PROBE.parent.parent)}
        out.write(b"$ build DeepSpeed's ops once for the environments that share them\n")
        out.flush()
        done = subprocess.run([str(python), "-c", code], stdout=out, stderr=subprocess.STDOUT, env=run_env, check=False, timeout=OPS_TIMEOUT_S)
        if done.returncode != 0:
            out.write(f"(not built here, exit {done.returncode}: the first cell that needs them will)\n".encode())

    def _create(self, env: Environment, target: Path, out: IO[bytes]) -> None:
        if self.uv:
            _step("create venv", [self.uv, "venv", "--quiet", "--python", env.python, str(target)], out)
            return
        interpreter = shutil.which(f"python{env.python}")
        if interpreter is None and f"{sys.version_info.major}.{sys.version_info.minor}" == env.python:
            interpreter = sys.executable
        if interpreter is None:
            raise BuildFailed(f"create venv: no python{env.python} on PATH; install it, or install uv (it finds or fetches Pythons)")
        _step("create venv", [interpreter, "-m", "venv", str(target)], out)

    def _pip(self, python: Path) -> list[str]:
        if self.uv:
            return [self.uv, "pip", "install", "--python", str(python), "--index-strategy", "unsafe-best-match", *self.settings.flags()]
        return [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile"]

    def _install(self, env: Environment, python: Path, out: IO[bytes]) -> None:
        wanted = self.install_set(env)
        extra = dict(wanted.build_env)
        leave_out = wanted.exclude_flags(python.parent.parent) if self.uv else []
        _step("install torch, transformers, peft and the extra packages", [*self._pip(python), *leave_out, *self.requirements(env)], out, env=extra)
        if wanted.excludes and not self.uv:  # pip has no --excludes: take them out again
            _step("remove excluded dependencies", [str(python), "-m", "pip", "uninstall", "-y", *wanted.excludes], out)

    def _install_flash(self, env: Environment, python: Path, out: IO[bytes]) -> dict[str, object]:
        """flash-attn's wheel name depends on the installed torch (version, CUDA, C++ ABI): read them there."""
        probe = "import torch,sys; print(torch.__version__.split('+')[0], torch.version.cuda, int(torch._C._GLIBCXX_USE_CXX11_ABI))"
        got = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, timeout=300)
        if got.returncode != 0:
            raise BuildFailed(f"read torch's build: {got.stderr.strip()[-500:]}")
        torch_version, cuda, abi = got.stdout.split()
        try:
            pick = flashsource.choose(
                env.flash_attn,
                torch=torch_version,
                cuda=cuda,
                python=env.python,
                abi=abi == "1",
                sources=self.sources.flash_attn,
                wheelhouse=self.sources.wheelhouse,
            )
            local = flashsource.fetch(pick, self.root / ".flash-wheels")
        except flashsource.NoFlashSource as exc:
            raise BuildFailed(f"install flash-attn: {exc}") from None
        _step(f"install flash-attn ({pick.source})", [*self._pip(python), *([str(local)] if local else pick.install_args())], out)
        site = next(python.parent.parent.glob("lib/python*/site-packages"), python.parent)
        return {**flashsource.build_facts(pick, local), "gpu_archs": elfarch.library_facts(site)}

    def _freeze(self, python: Path, out: IO[bytes]) -> list[str]:
        cmd = [self.uv, "pip", "freeze", "--python", str(python)] if self.uv else [str(python), "-m", "pip", "freeze"]
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if got.returncode != 0:
            raise BuildFailed(f"freeze: {got.stderr.strip()[-500:]}")
        return [line for line in got.stdout.splitlines() if line.strip()]


def _cell_env(venv: Path, env: Environment | None = None) -> dict[str, str]:
    """The cells' variables: every cache (the hub, vLLM, inductor, Triton, extensions compiled at first use)
    in the environment's own folder (probes/caches.py), shared by its cells and never by another environment's
    or the user's home; DeepSpeed's JIT ops in a folder shared by the environments of the same torch, Python,
    compiler and op sources (built once, under a lock)."""
    out = {**os.environ, "PYTHONUNBUFFERED": "1", **caches.variables(venv / CACHES)}
    out.pop("PYTHONDONTWRITEBYTECODE", None)  # the cells write the bytecode of what they import, once (module docstring)
    deepspeed = env.package("deepspeed") if env is not None else "none"
    if env is not None and deepspeed != "none":
        # deepspeed is not in the key: the probe names the op's folder by its sources' bytes (engines.op_digest)
        facts = {"torch": env.torch, "cuda": env.cuda, "python": env.python, "compiler": compiler(), "machine": platform.machine()}
        out.update(caches.shared_ops(venv.parent / SHARED_OPS, facts))
    return out


@functools.cache
def compiler() -> str:
    """The C++ compiler JIT ops are built with (torch's cpp_extension uses CXX, else c++): its version line."""
    name = os.environ.get("CXX") or "c++"
    try:
        got = subprocess.run([name, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return f"{name}: not found"
    return (got.stdout.splitlines() or [f"{name}: no version"])[0]


def _step(name: str, cmd: list[str], out: IO[bytes], env: dict[str, str] | None = None) -> None:
    """Run one build step into the build log; a failure names the step and quotes its last lines."""
    shown = " ".join(f"{k}={v}" for k, v in sorted((env or {}).items()))
    out.write(f"\n$ {shown + ' ' if shown else ''}{' '.join(cmd)}\n".encode())
    out.flush()
    try:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=STEP_TIMEOUT_S, stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildFailed(f"{name}: {exc}") from None
    out.write(proc.stdout)
    out.flush()
    if proc.returncode != 0:
        tail = proc.stdout.decode("utf-8", "replace").strip().splitlines()[-5:]
        raise BuildFailed(f"{name} failed (exit {proc.returncode}): " + " | ".join(tail))
