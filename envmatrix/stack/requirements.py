"""A pip requirements file (`requirements.txt`) read into a stack: exact pins with their local tags, the index
options (`--index-url`, `--extra-index-url`, `--find-links`), nested `-r`/`-c` files within bounds.

Each requirement line is parsed by packaging's Requirement (PEP 508); the file's own syntax around it (comments,
backslash continuations, options, per-requirement `--hash`) is pip's documented format, which no library
outside pip's internals parses. `${VAR}` is left as written: init does not read the environment into a file.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from probes.untrusted import size_text

from ..errors import InputError, printable
from ..facts import pkgconstraints
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
#: The packages every training stack installs: a constraint on them always applies.
CORE = frozenset({"torch", "transformers", "flash-attn"})
#: A requirement line that is a URL or a path (pip installs `https://…/pkg-1.0-py3-none-any.whl ; marker` as it is).
_BARE_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|file:|\.{1,2}/|/)", re.I)
#: `git+https://…/trl.git@v0.19.1#egg=trl`: the ref a VCS requirement is pinned to, and the name it installs as.
_VCS_REF = re.compile(r"@v?(?P<ref>\d+(?:\.\d+)+[\w.]*)(?:#|$)")
_EGG = re.compile(r"#egg=([A-Za-z0-9_.-]+)")


def _pin_hint(url: str, name: str) -> str:
    """What to write to make a package from git an axis: the release its tag names (`trl @ git+…@v0.19.1`)."""
    ref = _VCS_REF.search(url)
    return f" (at {ref.group('ref')}: pin {name}=={ref.group('ref')} to make it an axis)" if ref and name else ""


def wheel_of(url: str) -> tuple[str, str, str, str] | None:
    """(file name, name, version, local tag) of the wheel a URL points at, read from its file name (PEP 427); None for
    anything else."""
    file = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    if not file.endswith(".whl"):
        return None
    try:
        dist, version, _, _ = parse_wheel_filename(file)
    except InvalidWheelFilename:
        return None
    return file, str(dist), version.public, version.local or ""


def _bare(line: str) -> str | None:
    """A bare URL line as a PEP 508 `name @ url ; marker` requirement, its name from the wheel's file name; None where
    the line is not a URL or its name cannot be known (an sdist or VCS URL without #egg=)."""
    if not _BARE_URL.match(line):
        return None
    url, _, marker = line.partition(";")
    url = url.strip()
    wheel = wheel_of(url)
    egg = _EGG.search(url)
    name = wheel[1] if wheel else egg.group(1) if egg else None
    return f"{name} @ {url}" + (f" ; {marker.strip()}" if marker.strip() else "") if name else None


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
        self.named: set[str] = set()  # every package a requirement line names (constraints apply only to these)
        self.constraints: dict[str, tuple[str, str]] = {}  # name → (version, where): pins from -c files
        self.done: set[tuple[str, bool]] = set()  # (real path, as constraints) of every file read: each is read once
        self.bytes = 0  # read so far, every included file counted
        self.chain: list[str] = []  # the files being read, outermost first (an include loop is one met again here)

    def read(self, path: Path, depth: int = 0, *, constraint: bool = False) -> None:
        key = (os.path.realpath(path), constraint)
        if key[0] in self.chain:
            through = len(self.chain) - self.chain.index(key[0])
            raise InputError(f"{path}: an include loop (it includes itself through {through} file(s)); a file included more than once in one chain")
        if key in self.done:  # pip would apply the same lines again: they change nothing, so they are not re-read
            return
        self.done.add(key)
        self.files += 1
        if depth > MAX_INCLUDE_DEPTH or self.files > MAX_INCLUDED_FILES:
            raise InputError(f"{path}: included more than {MAX_INCLUDE_DEPTH} deep or more than {MAX_INCLUDED_FILES} files (an include loop?)")
        text = read_bounded(path, MAX_REQUIREMENTS_BYTES, "requirements file")
        self.bytes += len(text)
        if self.bytes > MAX_REQUIREMENTS_BYTES:
            raise InputError(
                f"{path}: the requirements file and the files it includes hold more than {size_text(MAX_REQUIREMENTS_BYTES)} together; is this the right file?"
            )
        self.chain.append(key[0])
        for number, line in logical_lines(text):
            self.line(path, number, line, depth, constraint)
        self.chain.pop()

    def line(self, path: Path, number: int, line: str, depth: int, constraint: bool) -> None:
        where = f"{path}:{number}"
        if line.startswith("-"):
            self.option(path, where, line, depth)
            return
        options = _OPTIONS.search(line)  # `name==1.0 --hash=sha256:...`: per-requirement options, not the requirement
        requirement = line[: options.start()] if options else line
        requirement = _bare(requirement.strip()) or requirement
        try:
            req = Requirement(requirement.strip())
        except InvalidRequirement as exc:
            hint = "; a URL line needs a wheel file name or #egg=NAME" if _BARE_URL.match(requirement.strip()) else ""
            if depth:  # an included file's line is named, never quoted: `-r` can name any file, secrets included
                raise InputError(f"{where}: not a requirement (an included file's lines are not quoted; open it at that line){hint}") from None
            said = printable(str(exc).splitlines()[0] if str(exc) else "")[:200]
            raise InputError(f"{where}: {printable(requirement.strip()[:120])!r} is not a requirement: {said}{hint}") from None
        try:
            if req.marker is not None and not req.marker.evaluate():
                self.stack.note(f"{where}: {req.name} left out: its marker ({req.marker}) is false for this interpreter", req.name)
                return
        except (InvalidMarker, UndefinedComparison, UndefinedEnvironmentName) as exc:
            said = f": {printable(str(exc))[:160]}" if depth == 0 else ""
            raise InputError(f"{where}: the marker of {req.name} cannot be evaluated{said}") from None
        if not constraint:
            self.named.add(canonicalize_name(req.name))
        if req.url:
            self.url(req, where)
            return
        exact = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
        if len(exact) != 1:
            if not constraint:
                self.stack.range(req.name, str(req.specifier), where)
            return
        if constraint:  # pip applies a constraint only to what something installs: decided when every file is read
            self.constraints[canonicalize_name(req.name)] = (exact[0].version, where)
            return
        if req.extras:
            self.stack.note(f"{where}: {req.name}[{','.join(sorted(req.extras))}]: the extras are installed by the resolver, the axis is {req.name}", req.name)
        self.stack.add(req.name, exact[0].version, where)

    def url(self, req: Requirement, where: str) -> None:
        """A requirement from a URL: a wheel's file name says its release (the baseline; envmatrix installs that release
        from its own sources); a VCS or sdist URL is the team's own build, not an axis (its tag is said)."""
        wheel = wheel_of(str(req.url))
        if wheel is not None and canonicalize_name(wheel[1]) == canonicalize_name(req.name):
            file, _, version, local = wheel
            self.stack.note(f"{where}: {req.name} {version} from a URL wheel ({printable(file)[:120]}): its release is the baseline", req.name)
            self.stack.add(req.name, f"{version}+{local}" if local else version, where)
            return
        hint = _pin_hint(str(req.url), req.name)
        self.stack.note(f"{where}: {req.name} comes from {printable(str(req.url))[:100]}, not a release: not an axis{hint}", req.name)

    def finish(self) -> None:
        """Constraints pin what the file installs (pip applies a constraint only to a package something requires): the
        packages its lines name, torch and transformers and flash-attn (a training stack's own), and what a pinned package
        requires by its wheel's metadata where envmatrix has read it (trl requires accelerate). The rest is said, not kept."""
        installed = self.named | CORE | self._required()
        for name, (version, where) in self.constraints.items():
            if name in self.stack.pins:
                continue
            if name in installed:
                self.stack.ranges.pop(name, None)
                self.stack.add(name, version, f"{where} (a constraint)")
            else:
                self.stack.note(f"{where}: {name}=={version} is only a constraint (nothing this file installs requires it): not an axis", name)

    def _required(self) -> set[str]:
        return required_by_pins(self.stack)

    def option(self, path: Path, where: str, line: str, depth: int) -> None:
        try:
            words = shlex.split(line, comments=False)
        except ValueError as exc:
            raise InputError(f"{where}: cannot read the options: {exc}") from None  # shlex says what is wrong, never the text
        i = 0
        while i < len(words):
            word = words[i]
            flag, eq, value = word.partition("=")
            if word in FLAGS or flag in FLAGS:
                if flag == "--no-index":
                    self.stack.note(f"{where}: --no-index: the file installs from find-links only")
                i += 1
                continue
            kind = VALUED.get(flag) or next((VALUED[k] for k in ("-r", "-c", "-i", "-f", "-e") if flag.startswith(k) and len(flag) > 2 and not eq), None)
            if kind is None:
                said = f"unknown option {printable(flag)[:40]!r}" if depth == 0 else "an unknown option (an included file's lines are not quoted)"
                raise InputError(f"{where}: {said}; a requirements file takes pip's options (-r, -c, -i, --extra-index-url, -f, ...)")
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
            egg = _EGG.search(value)
            package = egg.group(1) if egg else ""
            hint = _pin_hint(value, package)
            self.stack.note(f"{where}: an editable install ({printable(value)[:80]}): the team's own code, not an axis{hint}", package)


def read_requirements(path: Path) -> Stack:
    """A requirements file (and the files it includes) as a stack."""
    stack = Stack(source=str(path))
    reader = _Reader(stack)
    reader.read(path)
    reader.finish()
    return stack


def required_by_pins(stack: Stack) -> set[str]:
    """The packages the pinned ones require, as their releases' metadata says (envmatrix/facts/pkgconstraints.json):
    any release of them may come (init's reader and check both ask)."""
    known = pkgconstraints.releases()
    out: set[str] = set()
    for pin in stack.pins.values():
        release = known.get((pin.name, pin.version))
        for line in release.requires if release is not None else ():
            try:
                out.add(canonicalize_name(Requirement(line).name))
            except InvalidRequirement:
                continue
    return out
