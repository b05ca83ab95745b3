"""Errors a user can act on, each family with its own exit status (cibuildwheel's FatalError habit)."""

from __future__ import annotations

from probes.untrusted import printable as printable  # the one owner, shared with the probe


class EnvmatrixError(Exception):
    """Base: a message saying what failed, where, and what to do; `exit_code` is the CLI's status."""

    exit_code = 1


class SpecError(EnvmatrixError):
    """matrix.yaml (or a command-line selection) is invalid: nothing was run."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class InputError(EnvmatrixError):
    """A file or argument given to a command cannot be read or used."""

    exit_code = 2


class BackendError(EnvmatrixError):
    """An environment could not be prepared or a tool the backend needs is missing."""

    exit_code = 3


class HostProblem(BackendError):
    """The host cannot run any environment (its engine's disk is full, the engine does not see the runner's
    folders): the run stops with this message instead of recording every cell as failed."""


class Interrupted(EnvmatrixError):
    """The user stopped the run (Ctrl-C); completed records were kept."""

    exit_code = 130


class OutputError(EnvmatrixError):
    """An output (a folder, a file, standard output) cannot be written: a path problem or a full disk."""

    exit_code = 2
