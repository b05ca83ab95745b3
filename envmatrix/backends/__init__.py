"""Backends: prepare an environment once (an image or a venv), then run cells in it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..plan import Build


@dataclass(frozen=True)
class Prepared:
    """A ready environment: the interpreter cells run with, and what preparing it cost and recorded."""

    python: str
    seconds: float
    reused: bool
    facts: dict[str, object] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)


class BuildFailed(Exception):
    """An environment could not be prepared; its cells are recorded as build_failed with this message."""


class Backend(Protocol):
    """One small interface for every backend: the runner does not know which one it drives."""

    name: str

    def prepare(self, build: Build, log: Path) -> Prepared:
        """Create the environment (or reuse it); raise BuildFailed with the failing step."""
        ...
