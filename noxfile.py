"""Thin nox sessions: each parses its posargs and calls envmatrix; no logic lives here."""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))
from envmatrix.pipconfig import cpu_torch_install_args

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "uv|virtualenv"

# What the probe tests run on: the CPU torch this machine can get, pinned exactly.
PROBE_DEPS = ["transformers==4.57.6", "peft==0.21.2"]
CPU_TORCH = "2.13.0"


@nox.session
def tests(session: nox.Session) -> None:
    """Run the unit and integration tests (the probe trains for real on CPU)."""
    session.install("-e", ".[test]", *PROBE_DEPS, *cpu_torch_install_args(CPU_TORCH))
    session.run("pytest", *session.posargs)


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
    session.install("-e", ".", "uv")
    session.run("envmatrix", "run", *session.posargs)


@nox.session(default=False)
def cell(session: nox.Session) -> None:
    """Run one cell again: nox -s cell -- CELL_ID [run options]."""
    if not session.posargs:
        session.error("name the cell: nox -s cell -- CELL_ID (see nox -s plan)")
    session.install("-e", ".", "uv")
    session.run("envmatrix", "run", "--rerun", "--only", *session.posargs)


@nox.session(default=False)
def plan(session: nox.Session) -> None:
    """Show the cells of a profile: nox -s plan -- --profile gpu [--format json]."""
    session.install("-e", ".")
    session.run("envmatrix", "plan", *session.posargs)


@nox.session(default=False)
def probe(session: nox.Session) -> None:
    """Run the probe in a fresh CPU environment: nox -s probe -- [--scenario NAME] [--json]."""
    session.install("-e", ".", *PROBE_DEPS, *cpu_torch_install_args(CPU_TORCH))
    session.run("envmatrix", "probe", *session.posargs)
