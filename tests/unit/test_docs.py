"""The README and docs/ stay true to the code: every command and each of its options is in docs/commands.md, every
key of a matrix file and every scenario field in docs/matrix-yaml.md, every local link resolves, every nox session
named exists and every session is named; the README stays a page a newcomer reads in minutes."""

from __future__ import annotations

import argparse
import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from envmatrix.cli import build_parser
from envmatrix.spec import matrix

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Each (sub)command's path with its long options, walking argparse's subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))
    yield path, [o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"]


def test_every_command_and_option_is_in_the_commands_page() -> None:
    text = (DOCS / "commands.md").read_text()
    missing = []
    for path, options in commands(build_parser()):
        if path and f"`envmatrix {path[0]}" not in text:
            missing.append(" ".join(path))
        missing += [f"{' '.join(path) or 'envmatrix'} {o}" for o in options if not re.search(re.escape(o) + r"(?![\w-])", text)]
    assert not missing, f"docs/commands.md does not document: {missing}"


def test_every_matrix_key_and_scenario_field_is_in_the_matrix_page() -> None:
    text = (DOCS / "matrix-yaml.md").read_text()
    keys = {*matrix.TOP_KEYS, *matrix.PROFILE_KEYS, *matrix.SCHEDULER_KEYS, *matrix.TARGET_KEYS, *matrix.RULE_KEYS}
    keys |= {k for k in matrix.SCENARIO_FIELDS if k != "name"} | set(matrix.PREFLIGHT_FIELDS)
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, f"docs/matrix-yaml.md does not document: {missing}"
    for field, choices in matrix.CHOICES.items():
        if field != "expect":  # the outcome classes are verdict.md's table
            row = next((line for line in text.splitlines() if line.startswith(f"| `{field}`")), "")
            assert all(c in row for c in choices), f"docs/matrix-yaml.md: the `{field}` row lacks one of {choices}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_local_link_resolves(page: Path) -> None:
    text = page.read_text()
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+:", target):
            assert (page.parent / target).exists(), f"{page.name}: link to {target} resolves to nothing"


def nox_sessions() -> set[str]:
    """The sessions noxfile.py declares (a decorator's name= or the function's name), read without running nox."""
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    names = set()
    for fn in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        for deco in fn.decorator_list:
            src = ast.unparse(deco)
            if src.startswith("nox.session"):
                m = re.search(r"name=['\"]([\w-]+)['\"]", src)
                names.add(m.group(1) if m else fn.name)
    return names


def test_every_nox_session_named_exists_and_each_is_named() -> None:
    sessions = nox_sessions()
    assert {"tests", "matrix", "golden", "watch"} <= sessions
    named = {s for page in PAGES for s in re.findall(r"nox -s ([\w-]+)", page.read_text())}
    assert named <= sessions, f"the docs name sessions noxfile.py lacks: {named - sessions}"
    assert sessions <= named, f"sessions no page names: {sessions - named}"


def test_the_readme_is_short_and_keeps_the_quick_start() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 120, "README: keep it to a five-minute read; reference goes under docs/"
    quick = text[text.index("## Quick start") :].split("```")[1]
    assert [line.split("#")[0].strip() for line in quick.strip().splitlines()[1:]] == [
        "python3 -m pip install nox",
        "nox -s matrix",
        "nox -s tests",
    ]
    linked = set(re.findall(r"\(docs/([\w-]+\.md)\)", text))
    assert linked == {p.name for p in DOCS.glob("*.md")} - {"engines-research.md"}, "README: every docs page is linked"
