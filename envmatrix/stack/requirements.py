"""A pip requirements file (`requirements.txt`) read into a stack: exact pins with their local tags, the index
options (`--index-url`, `--extra-index-url`, `--find-links`), nested `-r`/`-c` files within bounds.

Each requirement line is parsed by packaging's Requirement (PEP 508); the file's own syntax around it (comments,
backslash continuations, options, per-requirement `--hash`) is pip's documented format, which no library
outside pip's internals parses. `${VAR}` is left as written: init does not read the environment into a file.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement

from ..errors import InputError, printable
from .base import MAX_INCLUDE_DEPTH, MAX_INCLUDED_FILES, MAX_REQUIREMENTS_BYTES, Stack, read_bounded

#: Options that take a value, as pip spells them; `--opt=value` and `--opt value` both work.
VALUED = {
    "-r": "requirement", "--requirement": "requirement", "-c": "constraint", "--constraint": "constraint",
    "-i": "index", "--index-url": "index", "--extra-index-url": "extra", "-f": "links", "--find-links": "links",
    "-e": "editable", "--editable": "editable", "--trusted-host": "ignored", "--only-binary": "ignored",
    "--no-binary": "ignored", "--use-feature": "ignored", "--config-settings": "ignored", "--global-option": "ignored",
}  # fmt: skip
FLAGS = ("--pre", "--prefer-binary", "--require-hashes", "--no-index")
_COMMENT = re.compile(r"(^|\s+)#.*$")
_OPTIONS = re.compile(r"\s+--?[A-Za-z]")


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: comments dropped, backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw)
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined = (pending + line).strip()
        pending = ""
        if joined:
            out.append((start, joined))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


class _Reader:
    """Reads one file and the files it includes, into one stack."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.files = 0

    def read(self, path: Path, depth: int = 0, *, constraint: bool = False) -> None:
        self.files += 1
        if depth > MAX_INCLUDE_DEPTH or self.files > MAX_INCLUDED_FILES:
            raise InputError(f"{path}: included more than {MAX_INCLUDE_DEPTH} deep or more than {MAX_INCLUDED_FILES} files (an include loop?)")
        text = read_bounded(path, MAX_REQUIREMENTS_BYTES, "requirements file")
        for number, line in logical_lines(text):
            self.line(path, number, line, depth, constraint)

    def line(self, path: Path, number: int, line: str, depth: int, constraint: bool) -> None:
        where = f"{path}:{number}"
        if line.startswith("-"):
            self.option(path, where, line, depth)
            return
        options = _OPTIONS.search(line)  # `name==1.0 --hash=sha256:...`: per-requirement options, not the requirement
        requirement = line[: options.start()] if options else line
        try:
            req = Requirement(requirement.strip())
        except InvalidRequirement as exc:
            raise InputError(f"{where}: {printable(requirement.strip()[:120])!r} is not a requirement: {printable(str(exc))[:200]}") from None
        try:
            if req.marker is not None and not req.marker.evaluate():
                self.stack.notes.append(f"{where}: {req.name} left out: its marker ({req.marker}) is false for this interpreter")
                return
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as exc:
            raise InputError(f"{where}: the marker of {req.name} cannot be evaluated: {exc}") from None
        if req.url:
            self.stack.notes.append(f"{where}: {req.name} comes from a URL, not a release: not an axis")
            return
        exact = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if len(exact) != 1:
            if not constraint:
                self.stack.ranges[req.name.lower()] = (str(req.specifier) or "any release", where)
            return
        if req.extras:
            self.stack.notes.append(f"{where}: {req.name}[{','.join(sorted(req.extras))}]: the extras are installed by the resolver, the axis is {req.name}")
        self.stack.add(req.name, exact[0].version, where)

    def option(self, path: Path, where: str, line: str, depth: int) -> None:
        try:
            words = shlex.split(line, comments=False)
        except ValueError as exc:
            raise InputError(f"{where}: cannot read the options: {exc}") from None
        i = 0
        while i < len(words):
            word = words[i]
            flag, eq, value = word.partition("=")
            if word in FLAGS or flag in FLAGS:
                if flag == "--no-index":
                    self.stack.notes.append(f"{where}: --no-index: the file installs from find-links only")
                i += 1
                continue
            kind = VALUED.get(flag) or next((VALUED[k] for k in ("-r", "-c", "-i", "-f", "-e") if flag.startswith(k) and len(flag) > 2 and not eq), None)
            if kind is None:
                raise InputError(
                    f"{where}: unknown option {printable(flag)!r}; a requirements file takes pip's options (-r, -c, -i, --extra-index-url, -f, ...)"
                )
            if not eq and flag in VALUED:
                if i + 1 >= len(words):
                    raise InputError(f"{where}: {flag} needs a value")
                value, i = words[i + 1], i + 2
            else:
                value = value if eq else flag[2:]
                i += 1
            self.valued(path, where, kind, value, depth)

    def valued(self, path: Path, where: str, kind: str, value: str, depth: int) -> None:
        if kind in ("requirement", "constraint"):
            self.read((path.parent / value) if not Path(value).is_absolute() else Path(value), depth + 1, constraint=kind == "constraint")
        elif kind == "index":
            self.stack.index_url = value
        elif kind == "extra":
            self.stack.extra_index_urls.append(value)
        elif kind == "links":
            self.stack.find_links.append(value)
        elif kind == "editable":
            self.stack.notes.append(f"{where}: an editable install ({printable(value)[:80]}): the team's own code, not an axis")


def read_requirements(path: Path) -> Stack:
    """A requirements file (and the files it includes) as a stack."""
    stack = Stack(source=str(path))
    _Reader(stack).read(path)
    return stack
