"""The stack and its pins (what the readers fill), and the one bounded read every reader starts with."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from probes import untrusted

from ..errors import InputError, printable

# Caps on the files init reads: their owner is probes/untrusted.py (the bounds on every file a user hands over).
MAX_REQUIREMENTS_BYTES = untrusted.REQUIREMENTS.max_bytes
MAX_LOCK_BYTES = untrusted.LOCK.max_bytes
MAX_INCLUDE_DEPTH = untrusted.REQUIREMENTS.max_depth
MAX_INCLUDED_FILES = 64
MAX_PACKAGES = untrusted.REQUIREMENTS.max_values
MAX_INTERPRETER_OUTPUT_BYTES = 4 << 20
#: A version's numbers: at most a file's digits per integer (Python refuses to read more than 4,300 as one).
MAX_VERSION_DIGITS = untrusted.REQUIREMENTS.max_digits
MAX_VERSION_CHARS = 256
_DIGITS = re.compile(r"\d+")
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
    about: dict[str, list[str]] = field(default_factory=dict)  # the notes on each package, by normalised name

    def note(self, text: str, package: str = "") -> None:
        """A note on what was read but not kept (or kept with a doubt); with `package`, init can say it beside that axis."""
        self.notes.append(text)
        if package:
            self.about.setdefault(canonicalize_name(package), []).append(text)

    def range(self, name: str, specifier: str, where: str) -> None:
        """A requirement that names a package without pinning it (a range, or any release)."""
        self.ranges[canonicalize_name(name)] = (specifier or "any release", where)

    def add(self, name: str, version: str, where: str) -> None:
        """Keep an exact pin; its version is checked as PEP 440 here (InputError naming `where`)."""
        if len(self.pins) >= MAX_PACKAGES:
            raise InputError(f"{where}: more than {MAX_PACKAGES:,} packages; is this a lock of one environment?")
        longest = max((len(run) for run in _DIGITS.findall(version)), default=0)
        if longest > MAX_VERSION_DIGITS or len(version) > MAX_VERSION_CHARS:
            raise InputError(
                f"{where}: {printable(name)[:100]}: a version of {len(version):,} characters (a number of {longest:,} digits); "
                f"no release has a number longer than {MAX_VERSION_DIGITS} digits"
            )
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
    """A user's file as text, read once within `limit` bytes (probes/untrusted.py: a FIFO or a device is refused
    unread); InputError (exit 2) naming it otherwise."""
    if not path.exists() and not path.is_symlink():
        raise InputError(f"{path}: no such file; give the {what} to read")
    if path.is_dir():
        raise InputError(f"{path}: is a folder, not a {what}")
    try:
        raw = untrusted.read_bytes(path, untrusted.Kind(f"a {what}", limit, hint="is this the right file?"))
    except untrusted.Refused as exc:
        raise InputError(str(exc)) from None
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")  # a byte-order mark (Windows editors) is no part of the text
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise InputError(f"{path}:{line}: not UTF-8 text (byte {raw[exc.start]:#04x}); a {what} is text") from None
