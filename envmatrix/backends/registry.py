"""The one place a backend is chosen by name: `auto`, `venv`, `host`, `docker`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError, InputError
from ..plan.install import Sources
from ..spec.matrix import Profile
from . import Backend, BuildFailed

NAMES = ("auto", "venv", "host", "docker")


@dataclass(frozen=True)
class BackendOptions:
    """What any backend may need from the command line and the profile."""

    profile_name: str
    profile: Profile
    gpu_count: int
    venvs: Path
    base: Path  # the matrix file's folder: relative paths in the profile are relative to it

    @property
    def sources(self) -> Sources:
        """Where the profile's environments get their files (plan/install.py)."""
        return Sources.of(self.profile, self.base)


def _venv(o: BackendOptions) -> Backend:
    from .venv import VenvBackend

    try:
        return VenvBackend(o.venvs, sources=o.sources)
    except BuildFailed as exc:
        raise BackendError(str(exc)) from None


def _host(o: BackendOptions) -> Backend:
    from .host import HostBackend

    return HostBackend()


def _docker(o: BackendOptions) -> Backend:
    from .docker import DockerBackend

    wheelhouse = o.sources.wheelhouse
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise InputError(f"wheelhouse {wheelhouse}: no such folder (profiles.{o.profile_name}.wheelhouse)")
    return DockerBackend(sources=o.sources)


BACKENDS: dict[str, Callable[[BackendOptions], Backend]] = {"venv": _venv, "host": _host, "docker": _docker}


def choose(name: str, gpu_count: int) -> tuple[str, str]:
    """The backend `auto` means here and why: docker on a GPU host with a reachable engine, else venv."""
    if name != "auto":
        return name, f"--backend {name}"
    if gpu_count == 0:
        return "venv", "no GPU found"
    from .docker import connect

    try:
        connect()
    except BackendError as exc:
        return "venv", f"GPU found but no usable Docker engine ({exc})"
    return "docker", "GPU and Docker engine found"


def make_backend(name: str, options: BackendOptions) -> Backend:
    """A backend by name (after `choose`)."""
    if name not in BACKENDS:
        raise InputError(f"--backend {name}: unknown; choose one of {', '.join(NAMES)}")
    return BACKENDS[name](options)
