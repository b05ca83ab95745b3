"""Thin nox sessions: each parses its posargs and calls envmatrix; no logic lives here."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from envmatrix.host.pipconfig import cpu_torch_install_args

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_venv = "yes"  # an unchanged matrix re-run must stay fast; installs below are idempotent
# uv installs without bytecode unless asked; with PYTHONDONTWRITEBYTECODE set, every import then
# recompiles (torch and pandas imports take seconds longer).
COMPILE = {"UV_COMPILE_BYTECODE": "1"}

# What the probe tests run on: the CPU torch this machine can get, pinned exactly.
PROBE_DEPS = ["transformers==4.57.6", "peft==0.21.2"]
CPU_TORCH = "2.13.0"


def install_once(session: nox.Session, *args: str) -> None:
    """Install into a reused venv only when pyproject.toml or the requirements changed: an unchanged
    matrix re-run then costs nox's start-up, not a rebuild of the editable package (2 s)."""
    stamp = Path(session.virtualenv.location) / ".envmatrix-installed"
    key = hashlib.sha256(Path("pyproject.toml").read_bytes() + repr(args).encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == key:
        return
    session.install(*args, env=COMPILE)
    stamp.write_text(key)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the unit and integration tests (the probe trains for real on CPU)."""
    session.install("-e", ".[test]", *PROBE_DEPS, *cpu_torch_install_args(CPU_TORCH), env=COMPILE)
    session.run("pytest", *session.posargs)


@nox.session(default=False)
def unit(session: nox.Session) -> None:
    """The fast layer only: pure unit tests and hostile inputs, no venvs, engines or browsers (seconds)."""
    session.install("-e", ".[test]", *PROBE_DEPS, *cpu_torch_install_args(CPU_TORCH), env=COMPILE)
    session.run("pytest", "tests/unit", "tests/hostile", "-m", "not integration", *session.posargs)


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff and mypy (strict) over the package, the probe, the tests and the benchmarks."""
    session.install("-e", ".[dev]", *PROBE_DEPS, *cpu_torch_install_args(CPU_TORCH))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """The main job: run the matrix on this machine (cpu profile without a GPU): nox -s matrix -- [run options]."""
    install_once(session, "-e", ".")
    session.run("envmatrix", "run", *session.posargs)


@nox.session(default=False)
def golden(session: nox.Session) -> None:
    """Two machines, one answer: run the cpu profile and compare every cell's outcome with the golden file."""
    install_once(session, "-e", ".")
    session.run("envmatrix", "run", "--profile", "cpu", "--reports", "reports/golden", *session.posargs)
    session.run("envmatrix", "golden", "--results", "reports/golden/results", "--golden", "tests/data/golden/cpu-outcomes.json")


@nox.session(name="gpu-check", default=False)
def gpu_check(session: nox.Session) -> None:
    """Self-test this GPU runner in minutes: driver, container runtime, bf16, NCCL, flash-attn, kernels (exit 3 without a GPU)."""
    install_once(session, "-e", ".")
    session.run("envmatrix", "gpu-check", *session.posargs)


@nox.session(name="gpu-tests", default=False)
def gpu_tests(session: nox.Session) -> None:
    """tests/gpu on this GPU host, with the CUDA torch its driver supports (envmatrix.host.cudatorch chooses it; exit 3 without a GPU)."""
    session.install("-e", ".", env=COMPILE)  # envmatrix alone first: it reads the driver and names the torch build
    torch = session.run("python", "-m", "envmatrix.host.cudatorch", CPU_TORCH, silent=True)
    session.install("-e", ".[test]", *PROBE_DEPS, *str(torch).split(), env=COMPILE)
    session.run("pytest", "tests/gpu", "-rs", *session.posargs)


@nox.session(default=False)
def rehearse(session: nox.Session) -> None:
    """The GPU dress rehearsal on this CPU machine (Docker; root for debootstrap): nox -s rehearse -- [--fast] [--envs N] [--gpu H20]."""
    install_once(session, "-e", ".[test]")
    session.run("python", "tests/rehearsal.py", *session.posargs)


@nox.session(default=False)
def pods(session: nox.Session) -> None:
    """The Kubernetes Jobs' containers run as their pods would, on this machine's Docker engine (the docker-socket variant
    too: about 10 minutes more than `nox -s tests`, which skips it): nox -s pods."""
    session.install("-e", ".[test]", *PROBE_DEPS, *cpu_torch_install_args(CPU_TORCH), env=COMPILE)
    session.run("pytest", "tests/integration/test_runner_image.py", *session.posargs, env={"ENVMATRIX_POD_TESTS": "1"})


@nox.session(default=False)
def cell(session: nox.Session) -> None:
    """Run one cell again: nox -s cell -- CELL_ID [run options]."""
    if not session.posargs:
        session.error("name the cell: nox -s cell -- CELL_ID (see nox -s plan)")
    install_once(session, "-e", ".")
    session.run("envmatrix", "run", "--rerun", "--only", *session.posargs)


@nox.session(default=False)
def report(session: nox.Session) -> None:
    """Render reports/matrix.html, results.csv and results.json: nox -s report -- [--results DIR]..."""
    install_once(session, "-e", ".")
    session.run("envmatrix", "report", *session.posargs)


@nox.session(default=False)
def watch(session: nox.Session) -> None:
    """Try new releases against your stack (the profile envmatrix init wrote): nox -s watch -- [--summary FILE.md] (exit 1: one breaks it)."""
    install_once(session, "-e", ".")
    session.run("envmatrix", "watch", *session.posargs)


@nox.session(default=False)
def lock(session: nox.Session) -> None:
    """Lock a vetted environment: nox -s lock -- ENV_ID | --best GPU."""
    install_once(session, "-e", ".", "pip")
    session.run("envmatrix", "lock", *session.posargs)


@nox.session(default=False)
def plan(session: nox.Session) -> None:
    """Show the cells of a profile: nox -s plan -- --profile gpu [--format json]."""
    install_once(session, "-e", ".")
    session.run("envmatrix", "plan", *session.posargs)


@nox.session(default=False)
def probe(session: nox.Session) -> None:
    """Run the probe in a fresh CPU environment: nox -s probe -- [--scenario NAME] [--json]."""
    session.install("-e", ".", *PROBE_DEPS, *cpu_torch_install_args(CPU_TORCH), env=COMPILE)
    session.run("envmatrix", "probe", *session.posargs)


@nox.session(default=False)
def nameindex(session: nox.Session) -> None:
    """Regenerate envmatrix/facts/nameindex.json from the stack's releases (wheels read with ast, never installed)."""
    # pip downloads the releases; the CPU torch and setuptools prepare DeepSpeed's and flash-attn's sdist metadata
    install_once(session, "-e", ".", "pip", "setuptools", "wheel", "packaging", *cpu_torch_install_args(CPU_TORCH))
    folder = Path(session.create_tmp()) / "nameindex-wheels"
    session.run("python", "-m", "envmatrix.facts.nameindex_build", "--download", str(folder), *session.posargs)
