"""An SVG badge per GPU type for a published site (`SITE/badges/<gpu>.svg`): "envmatrix · H20 · 12 vetted · 3 known bad",
so a project's README can show its own kept table at a glance and link to it.

The counts are the report's own: vetted environments by outputs/vetting.py's rule, known bad as the findings of
outputs/findings.py on that GPU type (a scenario that fails in every environment is a finding about the scenario, not a
stack, and is not counted, as `envmatrix check` does not count it). Every text is XML-escaped.
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

from ..outputs.findings import find
from ..outputs.vetting import failing_everywhere, vetted_environments
from ..records.record import Record

#: Colours: green when something is vetted and nothing known is bad, amber when both, red when only bad is known.
GREEN, AMBER, RED, GREY, LABEL = "#2e7d32", "#b26a00", "#c62828", "#757575", "#555"
#: Verdana 11px averages about 6.5 px a character (shields.io's flat style measures the same font).
CHAR_PX = 6.5


def counts(records: list[Record], gpu: str) -> tuple[int, int]:
    """(vetted environments, known-bad findings) on one GPU type."""
    mine = [r for r in records if r.cell.gpu == gpu]
    everywhere = set(failing_everywhere(mine).get(gpu, []))
    bad = [f for f in find(mine).findings if f.scenario not in everywhere]
    return len(vetted_environments(mine)), len(bad)


def svg(gpu: str, vetted: int, bad: int) -> str:
    """The badge: a grey label (`envmatrix · GPU`) and a coloured value (`N vetted · M known bad`)."""
    label = f"envmatrix · {gpu}"
    value = f"{vetted} vetted · {bad} known bad"
    colour = GREY if not vetted and not bad else RED if not vetted else AMBER if bad else GREEN
    lw, vw = int(len(label) * CHAR_PX) + 10, int(len(value) * CHAR_PX) + 10
    width = lw + vw
    title = escape(f"{label}: {value}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20" role="img" aria-label="{title}">'
        f"<title>{title}</title>"
        f'<rect width="{lw}" height="20" fill="{LABEL}"/><rect x="{lw}" width="{vw}" height="20" fill="{colour}"/>'
        f'<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">'
        f'<text x="{lw / 2:.1f}" y="14">{escape(label)}</text><text x="{lw + vw / 2:.1f}" y="14">{escape(value)}</text></g></svg>\n'
    )


def file_name(gpu: str) -> str:
    """`badges/h20.svg`: the GPU type lowercased, anything but letters, digits, `.`, `_`, `-` replaced."""
    return f"badges/{re.sub(r'[^a-z0-9._-]', '-', gpu.lower())}.svg"


def badges(records: list[Record]) -> dict[str, bytes]:
    """One badge per GPU type the records ran on, by its path in the site."""
    return {file_name(gpu): svg(gpu, *counts(records, gpu)).encode() for gpu in sorted({r.cell.gpu for r in records})}
