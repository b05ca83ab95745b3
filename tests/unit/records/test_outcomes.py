"""The outcome table is whole, and the HTML page, the terminal and the classifier take their facts from it."""

from __future__ import annotations

import dataclasses
import html
import io
import re

import pytest
from records_factory import make_record
from rich.console import Console
from rich.style import Style

from envmatrix.outputs.report import render_html
from envmatrix.outputs.summary import cell_text, code, print_summary
from envmatrix.records.outcomes import EXPECTABLE, OUTCOME_NAMES, TABLE, Outcome, OutcomeFacts, decided
from envmatrix.spec.matrix import CHOICES
from envmatrix.verdict.classify import RULES


def test_every_outcome_has_every_field() -> None:
    assert list(TABLE) == list(Outcome)
    for outcome, row in TABLE.items():
        assert row.outcome is outcome and row.name == outcome.value == str(outcome) and outcome.facts is row
        for f in dataclasses.fields(OutcomeFacts):
            value = getattr(row, f.name)
            assert value is not None and value != "", (outcome, f.name)
        assert row.glyph in ("✓", "·", "?", "✗") and re.fullmatch(r"#[0-9a-f]{6}", row.colour)
        assert re.fullmatch(r"[A-Z]{2,3}", row.code)
        Style.parse(row.style)  # a style rich knows
        assert isinstance(row.expectable, bool) and isinstance(row.rank, int)


def test_codes_and_ranks_are_unique() -> None:
    assert len({row.code for row in TABLE.values()}) == len(TABLE)
    assert sorted(row.rank for row in TABLE.values()) == list(range(len(TABLE)))


def test_the_classifier_tries_its_rules_in_the_tables_order() -> None:
    ranks = [TABLE[name].rank for name, _ in RULES]
    assert ranks == sorted(ranks)
    decided_elsewhere = {Outcome.OK, Outcome.INCONCLUSIVE, Outcome.SKIPPED, Outcome.WRONG_GPU}
    assert {name for name, _ in RULES} == set(Outcome) - decided_elsewhere
    assert max(ranks) < TABLE[Outcome.INCONCLUSIVE].rank < TABLE[Outcome.OK].rank  # only when no rule fires


def test_controls_may_expect_the_expectable_outcomes_only() -> None:
    assert tuple(o.value for o in Outcome if TABLE[o].expectable) == EXPECTABLE
    assert CHOICES["expect"] == EXPECTABLE
    assert not {"ok", "inconclusive", "skipped", "build_failed", "wrong_gpu"} & set(EXPECTABLE)


def test_a_verdict_decided_without_a_run_takes_the_tables_remedy() -> None:
    for outcome in Outcome:
        assert decided(outcome, "why", "rule").remedy == TABLE[outcome].remedy


def test_names_read_as_their_json_value() -> None:
    assert f"{Outcome.NAN_LOSS}" == "nan_loss" and f"{Outcome.OK:>4}" == "  ok" and Outcome.OK == "ok"
    assert tuple(o.value for o in Outcome) == OUTCOME_NAMES


@pytest.mark.parametrize("outcome", list(Outcome), ids=str)
def test_the_html_cell_shows_the_tables_colour_and_glyph(outcome: Outcome) -> None:
    row = TABLE[outcome]
    page = render_html([make_record(outcome.value, scenario=f"s-{outcome}")])
    cell = re.search(r'<td class="cell[^"]*"\s+style="background: ([^"]+)"[^>]*data-outcome="([^"]+)"[^>]*>([^<]*)</td>', page)
    assert cell is not None
    assert cell.group(1) == row.colour and cell.group(2) == outcome.value
    assert html.unescape(cell.group(3)).strip() == f"{row.glyph} {outcome}"
    assert f'<span style="background: {row.colour}">{row.glyph} {outcome}: 1</span>' in page  # the counts
    assert f'<span style="background: {row.colour}">{outcome}</span>' in page  # the legend


def test_the_html_legend_lists_every_outcome_in_the_tables_colours() -> None:
    page = render_html([make_record("ok")])
    legend = page[page.index('<div class="legend">') :]
    for row in TABLE.values():
        assert f'<span style="background: {row.colour}">{row.name}</span>' in legend


@pytest.mark.parametrize("outcome", list(Outcome), ids=str)
def test_the_terminal_shows_the_tables_glyph_style_and_code(outcome: Outcome) -> None:
    row = TABLE[outcome]
    record = make_record(outcome.value)
    assert cell_text(record) == f"[{row.style}]{row.glyph} {outcome}[/]"
    if outcome in (Outcome.OK, Outcome.SKIPPED):
        assert code(record) == f"[{row.style}]{row.glyph}[/]"
    else:
        assert code(record).endswith(f"{row.code}[/]")
    console = Console(width=200, record=True, file=io.StringIO(), color_system=None)
    print_summary(console, [record], results_dir="r")
    assert f"{row.glyph} {outcome} 1" in console.export_text()
