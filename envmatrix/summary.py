"""The terminal summary of a matrix run: environments × scenarios with outcome glyphs, counts, controls."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from .outcomes import glyph
from .records import Record


def cell_text(record: Record) -> str:
    """`✓ ok`, `✗ nan_loss`, a control as `◆ zero_grad` when reproduced and `! ok≠zero_grad` when not."""
    outcome = record.klass
    if record.control == "reproduced":
        return f"[green]◆ {outcome}[/]"
    if record.control == "not reproduced":
        return f"[bold red]! {outcome}≠{record.expect}[/]"
    if outcome == "ok":
        return "[green]✓ ok[/]"
    if outcome == "skipped":
        return "[dim]· skipped[/]"
    if outcome == "inconclusive":
        return f"[yellow]{glyph(outcome)} inconclusive[/]"
    return f"[red]✗ {outcome}[/]"


def print_summary(console: Console, records: list[Record], *, results_dir: str) -> list[Record]:
    """Print the table, the counts per class and the controls that did not reproduce; return those."""
    envs = list(dict.fromkeys(r.env for r in records))
    scenarios = list(dict.fromkeys(r.cell.scenario for r in records))
    by_id = {(r.env, r.cell.scenario): r for r in records}
    table = Table(title="envmatrix: environments × scenarios", show_lines=False)
    table.add_column("environment", overflow="fold")
    for s in scenarios:
        table.add_column(s, overflow="fold")
    for env in envs:
        table.add_row(env, *(cell_text(by_id[(env, s)]) if (env, s) in by_id else "" for s in scenarios))
    console.print(table)
    counts = Counter(r.klass for r in records)
    console.print("outcomes: " + ", ".join(f"{glyph(k)} {k} {v}" for k, v in counts.most_common()))
    failed = [r for r in records if r.control == "not reproduced"]
    controls = [r for r in records if r.control]
    if controls:
        console.print(f"controls: {len(controls) - len(failed)} of {len(controls)} reproduced their failure")
    for r in failed:
        console.print(f"[bold red]control not reproduced[/]: {r.id} expected {r.expect}, got {r.klass}: {r.outcome.evidence}")
    console.print(f"records: {results_dir}")
    return failed
