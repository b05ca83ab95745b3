"""Lock files read into a stack: PEP 751's pylock.toml (as `envmatrix lock`, uv and pip write it) and uv's
uv.lock. Both are TOML, parsed by the standard library's tomllib (tomli before Python 3.11); what each
format's tables mean is read from its specification (PEP 751; uv's documented lock file layout).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker, UndefinedComparison, UndefinedEnvironmentName, default_environment
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from probes import untrusted

from ..errors import InputError, printable
from .base import MAX_LOCK_BYTES, Stack, read_bounded

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_KINDS = {list: "an array", str: "a string", dict: "a table"}
#: The Python minors a lock's requires-python is matched against, oldest first.
PYTHONS = tuple(f"3.{minor}" for minor in range(8, 20))


def load_toml(path: Path, what: str) -> tuple[dict[str, Any], str]:
    """A TOML file within the lock bounds (size, then nesting, key length and digits in one linear pass before tomllib
    runs: probes/untrusted.py), and its text (for line numbers); InputError naming the line otherwise."""
    text = read_bounded(path, MAX_LOCK_BYTES, what)
    try:
        untrusted.toml_problem(text, path, untrusted.LOCK)
    except untrusted.Refused as exc:
        raise InputError(str(exc)) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None) or _line_in_message(str(exc))
        raise InputError(f"{path}{f':{line}' if line else ''}: not valid TOML: {printable(str(exc))[:200]}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to read as TOML") from None
    except ValueError as exc:  # an integer beyond Python's digit limit for text conversion
        raise InputError(f"{path}: a value TOML cannot hold here: {printable(str(exc))[:120]}") from None


def _line_in_message(message: str) -> int | None:
    found = re.search(r"at line (\d+)", message)
    return int(found.group(1)) if found else None


def table_lines(text: str, header: str) -> list[int]:
    """The line of every `[[header]]` table, in order, found in one pass (where a problem in the n-th is shown)."""
    pattern = re.compile(rf"^[ \t]*\[\[[ \t]*{re.escape(header)}[ \t]*\]\]", re.M)
    lines: list[int] = []
    last, count = 0, 1
    for found in pattern.finditer(text):
        count += text.count("\n", last, found.start())
        last = found.start()
        lines.append(count)
    return lines


def lowest_python(spec: str, where: str) -> str:
    """The oldest Python 3 minor a requires-python admits: the Python the stack is vetted on."""
    try:
        allowed = SpecifierSet(spec)
    except InvalidSpecifier:
        raise InputError(f"{where}: requires-python {printable(spec)[:80]!r} is not a version specifier") from None
    for minor in PYTHONS:
        if allowed.contains(f"{minor}.0", prereleases=True) or allowed.contains(f"{minor}.99", prereleases=True):
            return minor
    raise InputError(f"{where}: requires-python {spec!r} admits no Python 3 release from {PYTHONS[0]} to {PYTHONS[-1]}")


def _packages(path: Path, text: str, data: dict[str, Any], key: str) -> list[tuple[str, dict[str, Any]]]:
    """`[[key]]` tables with their location, each a table with a string name (InputError naming the line)."""
    entries = data.get(key, [])
    if not isinstance(entries, list):
        raise InputError(f"{path}: `{key}` must be an array of tables ([[{key}]])")
    out = []
    lines = table_lines(text, key)  # one pass for every table (a lookup per table rescanned the text: quadratic)
    for i, entry in enumerate(entries):
        where = f"{path}:{lines[i] if i < len(lines) else '?'}"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise InputError(f"{where}: [[{key}]] #{i + 1} has no name")
        if "version" in entry and not isinstance(entry["version"], str):
            raise InputError(f"{where}: {printable(entry['name'])[:100]}: version must be a string")
        for field, want in (("wheels", list), ("marker", str), ("source", dict), ("resolution-markers", list), ("sdist", dict)):
            if field in entry and not isinstance(entry[field], want):
                raise InputError(f"{where}: {printable(entry['name'])[:100]}: {field} must be {_KINDS[want]}, got {untrusted.kind_of(entry[field])}")
        for j, wheel in enumerate(entry.get("wheels", [])):
            if not isinstance(wheel, dict) or any(not isinstance(wheel.get(k, ""), str) for k in ("name", "url", "path")):
                raise InputError(f"{where}: {printable(entry['name'])[:100]}: wheels[{j}] must be a table whose name, url and path are strings")
        out.append((where, entry))
    return out


def _environment(python: str | None) -> dict[str, str]:
    """The marker environment a lock is read for: this host's platform, and the Python the stack is for."""
    env = {key: str(value) for key, value in default_environment().items()}
    if python:
        env.update(python_version=python, python_full_version=f"{python}.0")
    return env


def _holds(markers: list[str], env: dict[str, str]) -> bool:
    """Whether any of an entry's markers holds here (an entry without markers always does; one that cannot be evaluated
    is kept: the reader does not guess)."""
    if not markers:
        return True
    for text in markers:
        try:
            if Marker(text).evaluate(env):
                return True
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
            return True
    return False


class _Forks:
    """A package a lock holds more than once (forks by platform, Python or dependency group): the first entry that applies
    here is kept, and one note lists every build, so the user sees which one the profile took."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.seen: dict[str, list[str]] = {}

    def keep(self, name: str, version: str, *, applies: bool = True) -> bool:
        """True for the first entry of a package that applies here (the caller pins it); every entry is recorded for the note."""
        key = canonicalize_name(name)
        self.seen.setdefault(key, []).append(version)
        return applies and key not in self.stack.pins

    def say(self) -> None:
        for key, builds in self.seen.items():
            if len(set(builds)) > 1 and key in self.stack.pins:
                pin = self.stack.pins[key]
                kept = pin.version + (f"+{pin.local}" if pin.local else "")
                self.stack.note(
                    f"{pin.where}: {key} is locked as {', '.join(dict.fromkeys(builds))} (forks by platform, Python or group); "
                    f"kept {kept}, the first that applies here: edit the profile if your team runs another",
                    key,
                )


def read_pylock(path: Path) -> Stack:
    """PEP 751: `lock-version` 1.x, `requires-python`, and a `[[packages]]` table per package (a package
    without a version, a directory or VCS source, is the team's own code, not an axis)."""
    data, text = load_toml(path, "pylock.toml")
    version = data.get("lock-version")
    if not isinstance(version, str) or not re.fullmatch(r"1(\.\d+)?", version):
        raise InputError(f"{path}:{_key_line(text, 'lock-version')}: lock-version {printable(str(version))[:20]!r}: this reader knows PEP 751 lock-version 1.x")
    stack = Stack(source=str(path))
    stack.python = _python(path, text, data)
    env, forks = _environment(stack.python[0] if stack.python else None), _Forks(stack)
    for where, entry in _packages(path, text, data, "packages"):
        if "version" not in entry:
            stack.note(f"{where}: {entry['name']} has no version (a directory or VCS source): not an axis", entry["name"])
            continue
        marker = entry.get("marker")
        if isinstance(marker, str) and not _holds([marker], env):
            stack.note(f"{where}: {entry['name']} {entry['version']} left out: its marker ({printable(marker)[:120]}) is false here", entry["name"])
            continue
        version = _with_local(entry["version"], _wheel_names(entry.get("wheels")))
        if forks.keep(entry["name"], version):
            stack.add(entry["name"], version, where)
    forks.say()
    return stack


def read_uv_lock(path: Path) -> Stack:
    """uv.lock: `requires-python` and a `[[package]]` table per package; the project itself (an editable or
    virtual source) is left out; a package locked at several versions (forks by marker) keeps the first."""
    data, text = load_toml(path, "uv.lock")
    if not isinstance(data.get("version"), int):
        raise InputError(f"{path}: no `version = 1` at the top: not a uv.lock")
    stack = Stack(source=str(path))
    stack.python = _python(path, text, data)
    env, forks = _environment(stack.python[0] if stack.python else None), _Forks(stack)
    local = 0
    for where, entry in _packages(path, text, data, "package"):
        source: dict[str, Any] = entry["source"] if isinstance(entry.get("source"), dict) else {}
        if "version" not in entry or any(k in source for k in ("editable", "virtual", "directory")):
            local += 1
            continue
        markers = entry.get("resolution-markers")
        applies = not isinstance(markers, list) or _holds([m for m in markers if isinstance(m, str)], env)  # else another platform's fork
        version = _with_local(entry["version"], [str(w.get("url", "")) for w in entry.get("wheels", [])])
        if forks.keep(entry["name"], version, applies=applies):
            stack.add(entry["name"], version, where)
    if local:
        stack.note(f"{path}: {local} entries are the project or local folders (workspace members): not axes")
    forks.say()
    return stack


def _python(path: Path, text: str, data: dict[str, Any]) -> tuple[str, str] | None:
    """The Python a lock is for: the oldest minor its requires-python admits, and where that was read."""
    spec = data.get("requires-python")
    if not isinstance(spec, str):
        return None
    return lowest_python(spec, f"{path}:{_key_line(text, 'requires-python')}"), f"{path} requires-python {spec}"


def _wheel_names(wheels: Any) -> list[str]:
    return [str(w.get("name") or w.get("url") or "") for w in wheels if isinstance(w, dict)] if isinstance(wheels, list) else []


def _with_local(version: str, files: list[str]) -> str:
    """The version with its local tag: as written, else from the files (`torch-2.13.0+cpu-…whl`; `%2B` in URLs)."""
    if "+" in version:
        return version
    tags = {m.group(1) for f in files if (m := re.search(rf"-{re.escape(version)}(?:\+|%2B)([a-z0-9.]+)-", f))}
    return f"{version}+{tags.pop()}" if len(tags) == 1 else version


def _key_line(text: str, key: str) -> int | str:
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    return "1"
