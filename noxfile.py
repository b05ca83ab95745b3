"""Thin nox sessions: each parses its posargs and calls envmatrix; no logic lives here."""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "uv|virtualenv"

# The CPU torch the matrix and the probe tests use; a range admitting newer releases would pull a CUDA build.
CPU_TORCH = "torch==2.13.0"
PROBE_DEPS = [CPU_TORCH, "transformers==4.57.6", "peft==0.21.2"]


@nox.session
def tests(session: nox.Session) -> None:
    """Run the unit and integration tests (the probe runs for real on CPU)."""
    session.install("-e", ".[test]", *PROBE_DEPS)
    session.run("pytest", *session.posargs)


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff and mypy (strict) over the package and the probe."""
    session.install("-e", ".[dev]", CPU_TORCH, "transformers==4.57.6")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", "envmatrix", "probes")
    session.run("mypy")


@nox.session(default=False)
def plan(session: nox.Session) -> None:
    """Show the cells of a profile: nox -s plan -- --profile gpu [--format json]."""
    session.install("-e", ".")
    session.run("envmatrix", "plan", *session.posargs)
