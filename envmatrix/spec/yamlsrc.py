"""Read YAML into plain data while remembering the line of every value, so errors can point at it.

Floats are NOT resolved: `cuda: 12.10` must stay "12.10", never become 12.1. Fields that are really
numbers convert their strings themselves (spec.py).

A matrix file (or a GRPO config) is untrusted input, so loading is bounded by its kind's bounds
(probes/untrusted.py, their one owner): the file's size, the nesting depth, the digits of a number, and the
number of values once every alias is expanded (an alias costs what it expands to, so a 500-byte
"billion laughs" file is refused while composing, before anything grows). A recursive alias is an
error, not a RecursionError. YAML merge keys (`<<: *defaults`) work and are counted the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent

from probes import untrusted

from ..errors import InputError, SpecError, printable

Path_ = tuple[str | int, ...]

_MERGE = "tag:yaml.org,2002:merge"


class LimitError(yaml.YAMLError):
    """The document is beyond a loader bound (depth, expanded size, recursive alias)."""

    def __init__(self, line: int | None, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


class _Loader(yaml.SafeLoader):
    """SafeLoader without the float resolver (every dotted number stays a string), with bounds on
    nesting depth and on the expanded size of the node graph."""

    def __init__(self, stream: str, kind: untrusted.Kind) -> None:
        super().__init__(stream)
        self.kind = kind
        self.depth = 0
        self.nodes = 0
        self.reach = 0  # the deepest level reached inside the node being composed, aliases expanded
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) → (values, levels) it expands to, once composed

    def _charge(self, count: int, line: int) -> None:
        self.nodes += count
        most = self.kind.max_values
        if self.nodes > most:
            raise LimitError(line, f"the document expands to more than {most:,} values (aliases count as what they expand to); write it out plainly")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1
        if isinstance(event, AliasEvent):
            target = self.anchors.get(str(event.anchor))
            if target is not None:
                if id(target) not in self.sizes:
                    raise LimitError(line, f"alias *{printable(str(event.anchor))} refers to a value that contains it (a recursive alias)")
                size, height = self.sizes[id(target)]
                self._charge(size, line)
                if self.depth + height > self.kind.max_depth:
                    raise LimitError(line, f"aliases nest values more than {self.kind.max_depth} levels deep")
                self.reach = max(self.reach, self.depth + height)
            return super().compose_node(parent, index)
        self.depth += 1
        if self.depth > self.kind.max_depth:
            raise LimitError(line, f"nested more than {self.kind.max_depth} levels deep")
        before, outer_reach = self.nodes, self.reach
        self.reach = self.depth
        self._charge(1, line)
        node = super().compose_node(parent, index)
        if node is not None:
            self.sizes[id(node)] = (self.nodes - before, self.reach - self.depth + 1)
        self.reach = max(outer_reach, self.reach)
        self.depth -= 1
        return node


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:float"] for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def format_path(path: Path_) -> str:
    """`('profiles', 'gpu', 'torch', 2)` → `profiles.gpu.torch[2]` (hatch's style)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "(top level)"


class Source:
    """A loaded YAML document: `data` plus the line (1-based) where each path's value starts."""

    def __init__(self, name: str, data: Any, lines: dict[Path_, int]) -> None:
        self.name = name
        self.data = data
        self.lines = lines

    def where(self, path: Path_) -> str:
        """`matrix.yaml:12: profiles.gpu.torch[2]`: the nearest known line for the path."""
        probe = path
        while probe and probe not in self.lines:
            probe = probe[:-1]
        line = self.lines.get(probe)
        loc = f"{self.name}:{line}" if line else self.name
        return f"{loc}: {format_path(path)}"


class _Converter:
    """Node graph → plain data with lines; every problem is collected with its location."""

    def __init__(self, loader: _Loader, name: str) -> None:
        self.loader = loader
        self.name = name
        self.lines: dict[Path_, int] = {}
        self.problems: list[str] = []

    def err(self, node: yaml.Node, path: Path_, message: str) -> None:
        self.problems.append(f"{self.name}:{node.start_mark.line + 1}: {format_path(path)}: {message}")

    def convert(self, node: yaml.Node, path: Path_) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
        return self.scalar(node, path)

    def scalar(self, node: yaml.Node, path: Path_) -> Any:
        digits = self.loader.kind.max_digits
        if node.tag == "tag:yaml.org,2002:int" and len(str(node.value)) > digits:
            self.err(node, path, f"a number of {len(str(node.value)):,} characters; no field of {self.loader.kind.what} takes more than {digits}")
            return None
        try:
            return self.loader.construct_object(node)
        except (ValueError, OverflowError, yaml.YAMLError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            self.err(node, path, f"cannot read this value ({printable(reason)}); quote it to keep it as text")
            return None

    def key(self, node: yaml.Node, path: Path_) -> str | None:
        if not isinstance(node, yaml.ScalarNode):
            self.err(node, path, "a key must be a plain name, not a list or a mapping")
            return None
        key = self.scalar(node, path)
        return None if key is None else str(key)

    def mapping(self, node: yaml.MappingNode, path: Path_) -> dict[str, Any]:
        merged: dict[str, Any] = {}
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        self.err(value_node, (*path, "<<"), "a merge key ('<<') takes a mapping or a list of mappings, such as <<: *defaults")
                        continue
                    for k, v in self.mapping(source, path).items():
                        merged.setdefault(k, v)  # the first mapping listed wins (YAML's merge rule)
                continue
            key = self.key(key_node, path)
            if key is None:
                continue
            if key in out:
                self.err(key_node, (*path, key), f"duplicate key '{key}'; keep one of them")
            out[key] = self.convert(value_node, (*path, key))
        return {**merged, **out}


def load_yaml(path: Path, kind: untrusted.Kind = untrusted.MATRIX) -> Source:
    """Parse `path` within its kind's bounds; a missing file or a YAML error is an error naming the line."""
    if kind is untrusted.MATRIX and not path.exists():
        raise InputError(f"{path}: no such matrix file; pass one with --file or run from the project root")
    if kind is untrusted.MATRIX and path.is_dir():
        raise InputError(f"{path}: is a folder, not a matrix file; pass the file with --file")
    try:
        raw = untrusted.read_bytes(path, kind)
        text = raw.decode("utf-8")
    except untrusted.Refused as exc:
        raise InputError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: cannot read {kind.what}: {exc}") from None
    return parse_yaml(text, str(path), kind)


def _reader_problem(exc: yaml.reader.ReaderError, text: str) -> str:
    """A byte YAML refuses (a control character: ESC, NUL), named by line and column, never echoed."""
    line = text.count("\n", 0, exc.position) + 1
    column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
    return (
        f":{line}: column {column}: control character U+{exc.character:04X} (YAML allows none); remove it"
        if isinstance(exc.character, int)
        else f": {exc.reason}"
    )


def parse_yaml(text: str, name: str, kind: untrusted.Kind = untrusted.MATRIX) -> Source:
    """YAML text within its kind's bounds, errors named by `name` and line (a matrix `init` is about to write is
    checked here before it is written, under the user's file name rather than a temporary one)."""
    if len(text) > kind.max_bytes:
        raise InputError(f"{name}: more than {kind.what} may hold ({untrusted.size_text(kind.max_bytes)})")
    try:
        loader = _Loader(text, kind)
    except yaml.reader.ReaderError as exc:  # the reader checks every character before parsing starts
        raise SpecError([f"{name}{_reader_problem(exc, text)}"]) from None
    conv = _Converter(loader, name)
    try:
        node = loader.get_single_node()
        data = {} if node is None else conv.convert(node, ())
    except LimitError as exc:
        raise SpecError([f"{name}:{exc.line}: {exc.problem}"]) from None
    except yaml.reader.ReaderError as exc:
        raise SpecError([f"{name}{_reader_problem(exc, text)}"]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        what = "YAML syntax error" if isinstance(exc, (yaml.scanner.ScannerError, yaml.parser.ParserError)) else "YAML error"
        raise SpecError([f"{name}{line}: {what}: {printable(problem)}"]) from None
    except RecursionError:  # a guard only: the kind's max_depth stops nesting long before Python's limit
        raise SpecError([f"{name}: nested too deeply to read"]) from None
    finally:
        loader.dispose()
    if conv.problems:
        raise SpecError(conv.problems)
    return Source(name, data, conv.lines)
