"""The stack and its pins (what the readers fill), and the one bounded read every reader starts with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import InputError, printable

# Caps on the files init reads (to move into the bounds module on merge): a requirements file or a lock of a
# training stack is tens of KB (a uv.lock of a large monorepo a few MB); nested `-r` files a few levels deep.
MAX_REQUIREMENTS_BYTES = 1 << 20
MAX_LOCK_BYTES = 16 << 20
MAX_INCLUDE_DEPTH = 8
MAX_INCLUDED_FILES = 64
MAX_PACKAGES = 10_000
MAX_INTERPRETER_OUTPUT_BYTES = 4 << 20
INTERPRETER_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Pin:
    """One exactly pinned distribution: its public version, its local tag (`cu128`, `cpu`) and where it was read."""

    name: str
    version: str
    local: str = ""
    where: str = ""


@dataclass
class Stack:
    """A team's stack: pins by normalised name, the Python it is for (if the source says), its index
    settings, where it came from, and notes on what was read but not kept."""

    source: str
    pins: dict[str, Pin] = field(default_factory=dict)
    python: tuple[str, str] | None = None  # (3.MINOR, where it was read)
    index_url: str | None = None
    extra_index_urls: list[str] = field(default_factory=list)
    find_links: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ranges: dict[str, tuple[str, str]] = field(default_factory=dict)  # name → (specifier, where): read, but not a pin

    def add(self, name: str, version: str, where: str) -> None:
        """Keep an exact pin; its version is checked as PEP 440 here (InputError naming `where`)."""
        if len(self.pins) >= MAX_PACKAGES:
            raise InputError(f"{where}: more than {MAX_PACKAGES:,} packages; is this a lock of one environment?")
        try:
            parsed = Version(version)
        except InvalidVersion:
            raise InputError(f"{where}: {printable(name)} '{printable(version)}' is not a PEP 440 version") from None
        key = canonicalize_name(name)
        previous = self.pins.get(key)
        if previous is not None and previous.version != parsed.public:
            raise InputError(f"{where}: {key} pinned again at {parsed.public}, already {previous.version} at {previous.where}; a stack pins one release")
        self.pins[key] = Pin(key, parsed.public, parsed.local or "", where)


def read_bounded(path: Path, limit: int, what: str) -> str:
    """A user's file as text, read once within `limit` bytes; InputError (exit 2) naming it otherwise."""
    try:
        with path.open("rb") as fh:
            raw = fh.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; give the {what} to read") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder, not a {what}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise InputError(f"{path}: larger than {limit >> 10} KiB, the bound for a {what}; is this the right file?")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {raw[exc.start]:#04x}); a {what} is text") from None
