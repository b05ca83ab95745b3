"""A team's file with some pins moved, in the file's own format, every byte outside the changed pins kept
(`envmatrix watch --propose FILE`).

- requirements.txt: the version of each `name==X` line of a moved package is replaced in place (torch's local tag
  kept: `2.13.0+cpu` → `2.14.0+cpu`); a range, a URL or a pin in an included file is left as it is, and said.
- pylock.toml (PEP 751) and uv.lock: the `version` of the package's table is replaced, and its files (`wheels`,
  `sdist`, as sub-tables or inline) are replaced by the new release's files as the lookup gives them (URL and sha256,
  the index's own), so the lock still installs with hashes. Then both texts are parsed again (tomllib) and every
  other package must read exactly as before; the dependencies a new release brings are the resolver's (`uv lock`,
  `pip lock`) to settle, which the proposal says.

The stack readers (stack/) say where each pin is; this module only edits the text there.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import Version

from ..errors import InputError, printable
from .base import Stack

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: A release's files for a lock: (file URL, sha256) each; envmatrix's lock looks them up with pip (outputs/lock.py).
Lookup = Callable[[str, str], list[tuple[str, str]]]


@dataclass
class Proposed:
    """The new text, the pins it moved (name → (old, new)), and what it could not move, with why."""

    text: str
    moved: dict[str, tuple[str, str]] = field(default_factory=dict)
    left: list[str] = field(default_factory=list)


def _with_local(old: str, new: str) -> str:
    """The new release with the old pin's local tag (`+cpu`, `+cu128`) where the new one has none."""
    local = Version(old).local
    return f"{new}+{local}" if local and not Version(new).local else new


def _line_of(where: str, path: Path) -> int | None:
    """The line number of a pin read from `path` itself (None for one read from an included file)."""
    found = re.match(r"^(?P<path>.+?):(?P<line>[0-9]+)(?:\s.*)?$", where)
    if not found or Path(found.group("path")).resolve() != path.resolve():
        return None
    return int(found.group("line"))


def requirements(path: Path, text: str, stack: Stack, moves: Mapping[str, str]) -> Proposed:
    """A requirements file with each moved `name==X` pin's version replaced where it stands."""
    lines = text.splitlines(keepends=True)
    out = Proposed(text)
    for name, new in moves.items():
        key = canonicalize_name(name)
        pin = stack.pins.get(key)
        if pin is None:
            out.left.append(
                f"{name}: {stack.ranges[key][0]} at {stack.ranges[key][1]} is a range, not a pin" if key in stack.ranges else f"{name}: not in {path}"
            )
            continue
        number = _line_of(pin.where, path)
        if number is None:
            out.left.append(f"{name}: pinned at {pin.where}, not in {path.name} itself")
            continue
        pattern = re.compile(
            rf"(?i)(?<![A-Za-z0-9._-])({'[-_.]+'.join(map(re.escape, re.split(r'[-_.]+', key)))})(\s*(?:\[[^\]]*\])?\s*===?\s*)([A-Za-z0-9.+!_-]+)"
        )
        for i in range(number - 1, len(lines)):  # the logical line: its continuation lines too
            found = pattern.search(lines[i])
            if found:
                old = found.group(3)
                value = _with_local(old, new)
                lines[i] = lines[i][: found.start(3)] + value + lines[i][found.end(3) :]
                out.moved[key] = (old, value)
                break
            if not lines[i].rstrip("\r\n").endswith("\\"):
                out.left.append(f"{name}: {pin.where} is not a name==version line (a URL?)")
                break
    out.text = "".join(lines)
    return out


# ---- TOML locks ------------------------------------------------------------------------------------------


def _tables(lines: list[str], header: str) -> list[tuple[int, int]]:
    """(start, end) line spans of each `[[header]]` table, sub-tables (`[[header.wheels]]`, `[header.sdist]`) included."""
    starts = [i for i, line in enumerate(lines) if re.match(rf"^\s*\[\[\s*{re.escape(header)}\s*\]\]\s*(#.*)?$", line)]
    spans = []
    for n, start in enumerate(starts):
        end = len(lines)
        for j in range(start + 1, len(lines)):
            if j in starts or (re.match(r"^\s*\[", lines[j]) and not re.match(rf"^\s*\[\[?\s*{re.escape(header)}\.", lines[j])):
                end = j
                break
        spans.append((start, starts[n + 1] if n + 1 < len(starts) and starts[n + 1] < end else end))
    return spans


def _key_span(lines: list[str], start: int, end: int, key: str) -> tuple[int, int] | None:
    """The lines of `key = ...` directly in the table (a multi-line array runs to its closing bracket)."""
    for i in range(start + 1, end):
        if re.match(r"^\s*\[", lines[i]):
            return None  # a sub-table: the table's own keys are before it
        if re.match(rf"^\s*{re.escape(key)}\s*=", lines[i]):
            depth = 0
            for j in range(i, end):
                depth += lines[j].count("[") + lines[j].count("{") - lines[j].count("]") - lines[j].count("}")
                if depth <= 0:
                    return i, j + 1
            return i, end
    return None


def _file_name(url: str) -> str:
    return url.rsplit("/", 1)[-1].replace("%2B", "+")


def _files_pylock(files: list[tuple[str, str]], header: str) -> list[str]:
    wheels = [(u, h) for u, h in files if _file_name(u).endswith(".whl")]
    out = []
    for url, sha in wheels:
        out += ["", f"[[{header}.wheels]]", f'name = "{_file_name(url)}"', f'url = "{url}"', f'hashes = {{sha256 = "{sha}"}}']
    if not wheels and files:
        url, sha = files[0]
        out += ["", f"[{header}.sdist]", f'name = "{_file_name(url)}"', f'url = "{url}"', f'hashes = {{sha256 = "{sha}"}}']
    return [line + "\n" for line in out]


def _files_uv(files: list[tuple[str, str]]) -> list[str]:
    wheels = [(u, h) for u, h in files if _file_name(u).endswith(".whl")]
    out = []
    if wheels:
        out.append("wheels = [\n")
        out += [f'    {{ url = "{u}", hash = "sha256:{h}" }},\n' for u, h in wheels]
        out.append("]\n")
    else:
        out += [f'sdist = {{ url = "{u}", hash = "sha256:{h}" }}\n' for u, h in files[:1]]
    return out


def _safe(value: str) -> bool:
    """A URL or hash that can stand in a TOML basic string as it is."""
    return value.isascii() and value.isprintable() and not any(c in value for c in '"\\')


def lock(path: Path, text: str, moves: Mapping[str, str], lookup: Lookup, *, uv: bool) -> Proposed:
    """A pylock.toml or uv.lock with each moved package's version and files replaced; checked by parsing it again."""
    header = "package" if uv else "packages"
    lines = text.splitlines(keepends=True)
    out = Proposed(text)
    before = tomllib.loads(text)
    edits: list[tuple[int, int, list[str]]] = []
    for name, new in moves.items():
        key = canonicalize_name(name)
        spans = [(s, e) for s, e in _tables(lines, header) if _name(lines, s, e) == key]
        if not spans:
            out.left.append(f"{name}: no [[{header}]] table in {path.name}")
            continue
        if len(spans) > 1:
            out.left.append(f"{name}: locked {len(spans)} times (forks by platform or Python): move it with the resolver")
            continue
        start, end = spans[0]
        version = _key_span(lines, start, end, "version")
        if version is None:
            out.left.append(f"{name}: its table has no version (a directory or VCS package)")
            continue
        old = str(tomllib.loads("".join(lines[version[0] : version[1]]))["version"])
        value = _with_local(old, new)
        files = lookup(name, value)
        if not files or not all(_safe(u) and re.fullmatch(r"[0-9a-f]{64}", h) for u, h in files):
            out.left.append(f"{name} {value}: no files with a sha256 found to lock it by")
            continue
        edits.append((version[0], version[1], [re.sub(r'=\s*"[^"]*"', f'= "{value}"', lines[version[0]], count=1)]))
        drop = [span for k in ("wheels", "sdist") if (span := _key_span(lines, start, end, k)) is not None]
        subs = [i for i in range(start + 1, end) if re.match(rf"^\s*\[\[?\s*{re.escape(header)}\.(wheels|sdist)\s*\]\]?", lines[i])]
        for i in subs:  # a sub-table runs to the next table header or a blank line before one
            j = next((k for k in range(i + 1, end) if re.match(r"^\s*\[", lines[k])), end)
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1
            drop.append((i, j))
        for s, e in drop:
            edits.append((s, e, []))
        new_files = _files_uv(files) if uv else _files_pylock(files, header)
        at = max([e for _, e in drop] + [version[1]])
        if not uv:
            at = end
            while at > start and not lines[at - 1].strip():
                at -= 1
        edits.append((at, at, new_files))
        out.moved[key] = (old, value)
    for s, e, repl in sorted(edits, key=lambda x: (x[0], x[1]), reverse=True):
        lines[s:e] = repl
    out.text = "".join(lines)
    _same_elsewhere(before, tomllib.loads(out.text), header, set(out.moved), path)
    return out


def _name(lines: list[str], start: int, end: int) -> str:
    span = _key_span(lines, start, end, "name")
    if span is None:
        return ""
    try:
        return canonicalize_name(str(tomllib.loads("".join(lines[span[0] : span[1]]))["name"]))
    except (tomllib.TOMLDecodeError, KeyError):
        return ""


def _same_elsewhere(before: dict[str, Any], after: dict[str, Any], header: str, moved: set[str], path: Path) -> None:
    """Every key and every package that was not moved reads exactly as before (else the edit is a bug, nothing is written)."""
    strip = {k: v for k, v in before.items() if k != header} == {k: v for k, v in after.items() if k != header}
    kept_before = [p for p in before.get(header, []) if canonicalize_name(str(p.get("name"))) not in moved]
    kept_after = [p for p in after.get(header, []) if canonicalize_name(str(p.get("name"))) not in moved]
    if not strip or kept_before != kept_after or len(before.get(header, [])) != len(after.get(header, [])):
        raise InputError(f"{path}: moving {', '.join(sorted(moved))} would change other entries of the lock (an unusual layout); nothing was proposed")


def propose(path: Path, stack: Stack, moves: Mapping[str, str], lookup: Lookup) -> Proposed:
    """The file at `path` (read by stack/) with the moves applied in its own format."""
    from . import _PYLOCK, _UV_LOCK, _head
    from .locks import load_toml

    name = path.name
    # the kind as read_stack knows it: by name, else by what the first lines say (`team.pylock`, `uv-py312.lock`)
    pylock = name == "pylock.toml" or (name.startswith("pylock.") and name.endswith(".toml"))
    uv = name == "uv.lock"
    if not (pylock or uv):
        head = _head(path)
        pylock = bool(_PYLOCK.search(head))
        uv = not pylock and bool(_UV_LOCK.search(head))
    if pylock or uv:
        _, text = load_toml(path, "uv.lock" if uv else "pylock.toml")
        return lock(path, text, moves, lookup, uv=uv)
    from .base import MAX_REQUIREMENTS_BYTES, read_bounded

    raw = read_bounded(path, MAX_REQUIREMENTS_BYTES, "requirements file")
    text = path.read_bytes().decode("utf-8")  # the exact bytes (a byte-order mark, line endings) are kept
    if text.removeprefix("\ufeff") != raw:
        raise InputError(f"{printable(str(path))}: changed while it was read; try again")
    return requirements(path, text, stack, moves)
