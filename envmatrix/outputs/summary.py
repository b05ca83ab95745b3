"""The terminal summary of a matrix run: findings first, then a table that fits the terminal.

`nox` is not a TTY, so the table must read at 80 columns: rows are labelled only by the axis values
that vary, scenarios are letters with a key, outcomes short codes with a key; where even that does
not fit, each environment gets one line listing what did not train.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.table import Table

from ..records.outcomes import DRIFT, FAILURE_GLYPH, Outcome, facts_of, glyph
from ..records.record import Record, Status
from .drift import DriftReport
from .drift import report as drift_report
from .findings import Findings, find, version_order
from .vetting import failing_everywhere, fold_text, not_applicable, standings

#: Column headers for the axes that label rows.
AXIS_HEADERS = {"cuda": "cuda", "torch": "torch", "transformers": "tf", "flash_attn": "fa", "gpu": "gpu", "python": "py"}


def cell_text(record: Record) -> str:
    """`✓ ok`, `✗ nan_loss`, a control as `◆ zero_grad` (quiet) when reproduced and `! ok≠zero_grad` (loud) when not."""
    outcome = record.klass
    if record.control == "reproduced":
        return f"[dim green]◆ {outcome}[/]"
    if record.control == "not reproduced":
        return f"[bold red]! {outcome}≠{record.expect}[/]"
    row = facts_of(outcome)
    return f"[{row.style}]{row.glyph} {outcome}[/]"


def short(outcome: str) -> str:
    """The outcome's 2-3 letter code in the compact table (grad_lost → GL)."""
    return facts_of(outcome).code


#: Outcomes the compact table shows by glyph alone: what is fine or says nothing about the stack.
PLAIN = (Outcome.OK, Outcome.SKIPPED)


def code(record: Record) -> str:
    """The table's cell: ✓, ◆ (reproduced control), · (skipped), ✗GL (anything else, inconclusive too: loud,
    since it is not ok), !OK (control not reproduced)."""
    if record.control == "reproduced":
        return "[dim]◆[/]"
    if record.control == "not reproduced":
        return f"[bold red]!{short(record.klass)}[/]"
    row = facts_of(record.klass)
    if row.outcome in PLAIN:
        return f"[{row.style}]{row.glyph}[/]"
    return f"[bold red]{FAILURE_GLYPH}{row.code}[/]"


def letters(i: int) -> str:
    """0 → A, 25 → Z, 26 → AA."""
    out = ""
    i += 1
    while i:
        i, rem = divmod(i - 1, 26)
        out = chr(65 + rem) + out
    return out


def varying_axes(records: Iterable[Record]) -> list[str]:
    """The axes with more than one value, package axes included (the GPU when nothing varies: a row needs a label)."""
    values: dict[str, set[str]] = {}
    for r in records:
        for axis, value in {**r.cell.axes(), **r.cell.packages}.items():
            values.setdefault(axis, set()).add(value)
    return [a for a in values if len(values[a]) > 1] or ["gpu"]


def print_findings(console: Console, found: Findings) -> None:
    """Changes since the previous run, then what differs between environments, then the controls line."""
    if found.changes or found.findings:
        console.print("[bold]Findings[/]")
    for change in found.changes:
        console.print(f"[bold yellow]▲ {escape(change.text)}[/]")
        console.print(Padding(f"evidence: {escape(change.record.outcome.evidence)}", (0, 0, 0, 4)))
    for f in found.findings:
        console.print(f"[bold red]●[/] {escape(f.text)}")
        console.print(Padding(f"evidence ({escape(f.example.env)}): {escape(f.example.outcome.evidence)}", (0, 0, 0, 4)))
        console.print(Padding(f"remedy: {escape(f.example.outcome.remedy)}", (0, 0, 0, 4)))
        if f.note:
            console.print(Padding(f"elsewhere: {escape(f.note)}", (0, 0, 0, 4)))
    if not found.findings and not found.changes:
        console.print("Findings: no healthy scenario's outcome differs between the environments run")
    style = "bold red" if found.controls.failed else "dim"
    console.print(f"[{style}]{found.controls.text}[/]")
    for r in found.controls.failed:
        loud = "[bold red]control NOT reproduced (its detector is broken here)[/]"
        console.print(f"{loud}: {escape(r.id)} expected {r.expect}, got {r.klass}: {escape(r.outcome.evidence)}")


def print_drift(console: Console, drift: DriftReport) -> None:
    """The drift line, each drifting cell, and a drift control that was not found (loud: the detector is broken)."""
    if not drift.comparisons:
        return
    missed = drift.controls_missed
    console.print(f"[{'bold red' if missed else 'dim'}]{escape(drift.text)}[/]")
    for c in drift.drifting:
        console.print(f"[yellow]{DRIFT.glyph}[/] {escape(c.text)}")
    for c in missed:
        console.print(f"[bold red]drift control NOT found (the drift detector is broken here)[/]: {escape(c.text)}")


def compact_table(records: list[Record]) -> tuple[Table, list[str]]:
    """Rows: environments labelled by the varying axes; columns: scenario letters. Returns the key lines too."""
    axes = varying_axes(records)
    first = {r.env: r for r in reversed(records)}
    envs = sorted(first, key=lambda e: [version_order(v) for v in first[e].cell.axes().values()])
    controls = {r.cell.scenario for r in records if r.expect}
    scenarios = sorted(dict.fromkeys(r.cell.scenario for r in records), key=lambda s: s in controls)  # healthy first, stable
    by_cell = {(r.env, r.cell.scenario): r for r in records}
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, show_edge=False)
    for axis in axes:
        table.add_column(AXIS_HEADERS.get(axis, axis), no_wrap=True)
    for i in range(len(scenarios)):
        table.add_column(letters(i), no_wrap=True, justify="center")
    table.add_column("n/a", no_wrap=True, justify="right", style="dim")  # cells folded away: not applicable by design
    for env in envs:
        label = [escape({**first[env].cell.axes(), **first[env].cell.packages}.get(a, "none")) for a in axes]
        folded = sum(not_applicable(r) for r in records if r.env == env)
        table.add_row(
            *label, *(code(by_cell[(env, s)]) if (env, s) in by_cell and not not_applicable(by_cell[(env, s)]) else "" for s in scenarios), str(folded or "")
        )
    key = [f"{letters(i)} {s}" for i, s in enumerate(scenarios)]
    return table, key


def _width(renderable: Table) -> int:
    """The widest line the table renders to (measured, not guessed)."""
    probe = Console(width=1000, file=io.StringIO(), record=True, color_system=None)
    probe.print(renderable)
    return max((len(line.rstrip()) for line in probe.export_text().splitlines()), default=0)


def _per_environment(console: Console, records: list[Record]) -> None:
    """One line per environment (the table would not fit): its id and what did not train."""
    envs = list(dict.fromkeys(r.env for r in records))
    for env in envs:
        mine = [r for r in records if r.env == env]
        counts = Counter("control" if r.control == "reproduced" else r.klass for r in mine if r.klass == Outcome.OK or r.control == "reproduced")
        bad = [r for r in mine if r.klass not in PLAIN and r.control != "reproduced" and not not_applicable(r)]
        ran = sum(r.status != Status.SKIPPED for r in mine)
        folded = fold_text(ran, sum(not_applicable(r) for r in mine))
        line = f"{escape(env)}: {folded}: {glyph(Outcome.OK)} {counts[Outcome.OK]} ok, ◆ {counts['control']} controls"
        console.print(line)
        for r in bad:
            console.print(f"    {code(r)} {escape(r.cell.scenario)} {r.klass}")


def print_summary(console: Console, records: list[Record], *, results_dir: str, previous: Iterable[Record] = ()) -> list[Record]:
    """Findings first, then the table (or one line per environment where it would not fit), the
    counts and the records folder; returns the controls that did not reproduce."""
    found = find(records, previous)
    print_findings(console, found)
    print_drift(console, drift_report(records))
    table, key = compact_table(records)
    shown = {r.klass for r in records if r.klass not in PLAIN and r.control != "reproduced"}
    if _width(table) <= console.width:
        console.print(table)
        for line in pack(["key:", *key], console.width):
            console.print(escape(line))
    else:
        _per_environment(console, records)
    legend = [
        f"{glyph(Outcome.OK)} ok",
        "◆ control reproduced",
        f"{FAILURE_GLYPH} failure",
        "! control NOT reproduced",
        f"{glyph(Outcome.SKIPPED)} skipped",
        *(f"{short(k)}={k}" for k in sorted(shown)),
    ]
    for line in pack(legend, console.width):
        console.print(escape(line))
    na = sum(not_applicable(r) for r in records)
    counts = Counter(r.klass for r in records if r.control != "reproduced" and not not_applicable(r))
    quiet = [f"◆ controls reproduced {found.controls.reproduced}"] if found.controls.reproduced else []
    quiet += [f"not applicable (blank) {na}"] if na else []
    for line in pack(["outcomes:", *(f"{glyph(k)} {k} {v}" for k, v in counts.most_common()), *quiet], console.width):
        console.print(line)
    print_vetting(console, records)
    console.print(f"records: {escape(results_dir)}")
    return list(found.controls.failed)


def print_vetting(console: Console, records: list[Record]) -> None:
    """What each environment is vetted for, standing on its controls; scenarios that fail everywhere first."""
    for gpu, scenarios in failing_everywhere(records).items():
        console.print(
            f"[bold]{escape(', '.join(scenarios))}[/] failed in every environment on {escape(gpu)}: a finding about the scenario, not the environments"
        )
    for s in standings(records):
        if s.vetted:
            head = f"[green]vetted[/] {escape(s.env)}: vetted for {escape(', '.join(s.scenarios))}"
        else:
            head = f"[dim]not vetted[/] {escape(s.env)}: {escape(s.why_not())}"
        fails = f"; fails {escape(', '.join(s.fails))}" if s.fails else ""
        console.print(f"{head}{fails}; controls {s.controls}/{s.controls_ran}")


def pack(entries: list[str], width: int) -> list[str]:
    """Entries joined two spaces apart into lines of at most `width`, never breaking an entry."""
    lines: list[str] = []
    for entry in entries:
        if lines and len(lines[-1]) + 2 + len(entry) <= width:
            lines[-1] += "  " + entry
        else:
            lines.append(entry)
    return lines
