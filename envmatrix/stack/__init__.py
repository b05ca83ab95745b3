"""What a team already has, read into pinned versions: a requirements.txt, a PEP 751 pylock.toml, a uv.lock,
or an interpreter's installed distributions. `envmatrix init` turns a stack into a profile.

Every reader is handed an untrusted file: it is read once within a size bound, parsed by a well-kept parser
(packaging for requirement lines and versions, tomllib for TOML), and every problem is an InputError (exit 2)
that names the file and the line.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import InputError
from .base import Stack

__all__ = ["Stack", "read_stack"]


#: What a lock says of itself in its first lines: PEP 751's `lock-version`, uv's `version = N` then `[[package]]` tables.
_PYLOCK = re.compile(r"^lock-version\s*=", re.M)
_UV_LOCK = re.compile(r"^version\s*=\s*\d+\s*$.*^\[\[package\]\]", re.M | re.S)
SNIFF_BYTES = 64 << 10


def read_stack(path: Path) -> Stack:
    """A stack from a file, by its kind: pylock.toml (PEP 751), uv.lock, else a requirements file. A copy saved under
    another name (`uv-py312.lock`, `team.pylock`) is known by what its first lines say."""
    from . import locks, requirements

    name = path.name
    if name == "uv.lock":
        return locks.read_uv_lock(path)
    if name == "pylock.toml" or (name.startswith("pylock.") and name.endswith(".toml")):
        return locks.read_pylock(path)
    head = _head(path)
    if _PYLOCK.search(head):
        return locks.read_pylock(path)
    if _UV_LOCK.search(head):
        return locks.read_uv_lock(path)
    if name.endswith(".toml"):
        raise InputError(f"{path}: a TOML file init does not know; give a pylock.toml (PEP 751), a uv.lock or a requirements file")
    return requirements.read_requirements(path)


def _head(path: Path) -> str:
    """The first bytes of a regular file as text ('' for anything else: the reader then refuses it in its own words)."""
    try:
        if not path.is_file():
            return ""
        with path.open("rb") as fh:
            return fh.read(SNIFF_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
