"""Read YAML into plain data while remembering the line of every value, so errors can point at it.

Floats are NOT resolved: `cuda: 12.10` must stay "12.10", never become 12.1. Fields that are really
numbers convert their strings themselves (spec.py).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError, SpecError

Path_ = tuple[str | int, ...]


class _Loader(yaml.SafeLoader):
    """SafeLoader without the float resolver: every dotted number stays a string."""


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


def _convert(loader: _Loader, node: yaml.Node, path: Path_, lines: dict[Path_, int], problems: list[str], name: str) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node)
            key = str(key) if not isinstance(key, str) else key
            if key in out:
                problems.append(f"{name}:{key_node.start_mark.line + 1}: {format_path((*path, key))}: duplicate key '{key}'; keep one of them")
            out[key] = _convert(loader, value_node, (*path, key), lines, problems, name)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_convert(loader, item, (*path, i), lines, problems, name) for i, item in enumerate(node.value)]
    return loader.construct_object(node)


def load_yaml(path: Path) -> Source:
    """Parse `path`; a missing file or a YAML syntax error is a SpecError naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such matrix file; pass one with --file or run from the project root") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the matrix file: {exc}") from None
    loader = _Loader(text)
    lines: dict[Path_, int] = {}
    problems: list[str] = []
    try:
        node = loader.get_single_node()
        data = {} if node is None else _convert(loader, node, (), lines, problems, str(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([f"{path}{line}: YAML syntax error: {problem}"]) from None
    finally:
        loader.dispose()
    if problems:
        raise SpecError(problems)
    return Source(str(path), data, lines)


_BRACES = re.compile(r"\{([^{}]*)\}")


def expand_braces(pattern: str) -> list[str]:
    """`a-{x,y}-*` → [`a-x-*`, `a-y-*`]: brace alternatives for fnmatch, nested ones too."""
    match = _BRACES.search(pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    out: list[str] = []
    for alt in match.group(1).split(","):
        out.extend(expand_braces(head + alt + tail))
    return out
