"""Which verified result stands for a cell, when several trusted signers (or one signer's several sites) hold it.

Trust is monotonic: for one cell and one trusted signer, the newest result by its signed time stands (the
record's `finished`, else `started`: inside the record's bytes, which the signature covers), never the one a
later `--results` argument happened to list. An older result never replaces a newer one: it is shown apart
as superseded. Trusted signers whose standing results disagree are a conflict: all are shown apart, none is
counted, so nothing is vetted on a disputed cell. Signers that agree: the newest stands, the others are
shown apart as agreeing.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # provenance.Merged calls this module: no import back at run time
    from .provenance import Sourced

_OLDEST = datetime.datetime.min.replace(tzinfo=datetime.timezone.utc)


def signed_time(row: Sourced) -> datetime.datetime:
    """When the record says its cell ran (finished, else started); the oldest possible time when it says nothing
    readable (so a record without a time never replaces one with it)."""
    for text in (row.record.finished, row.record.started):
        if not text:
            continue
        try:
            when = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
        except ValueError:
            continue
        return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)
    return _OLDEST


def _verdict(row: Sourced) -> tuple[str, str | None]:
    return row.record.klass, row.record.control


def _said(row: Sourced) -> str:
    when = signed_time(row)
    at = when.isoformat(timespec="seconds") if when != _OLDEST else "no time"
    return f"{str(row.provenance.signer)[:16]} says {row.record.klass} ({at}, {row.provenance.source})"


def _apart(row: Sourced, standing: str, note: str) -> Sourced:
    return type(row)(row.record, replace(row.provenance, standing=standing, note=note))


def standing(rows: Iterable[Sourced]) -> tuple[list[Sourced], list[Sourced]]:
    """(the verified results that stand, one per cell at most; the others, each with a note saying why not:
    superseded, in conflict, or agreeing with the one that stands). Rows must all be verified."""
    cells: dict[str, list[Sourced]] = {}
    for row in rows:
        cells.setdefault(row.record.id, []).append(row)
    stand: list[Sourced] = []
    apart: list[Sourced] = []
    for cell_rows in cells.values():
        heads: list[Sourced] = []
        by_signer: dict[str, list[Sourced]] = {}
        for row in cell_rows:
            by_signer.setdefault(str(row.provenance.signer), []).append(row)
        for signer_rows in by_signer.values():
            newest = max(signed_time(r) for r in signer_rows)
            top = [r for r in signer_rows if signed_time(r) == newest]
            heads += top
            head = top[0]
            apart += [
                _apart(r, "superseded", f"superseded: {str(r.provenance.signer)[:16]} signed a newer result ({_said(head)})")
                for r in signer_rows
                if signed_time(r) < newest
            ]
        if len({_verdict(h) for h in heads}) > 1:
            said = "; ".join(_said(h) for h in sorted(heads, key=signed_time))
            apart += [_apart(h, "conflict", f"conflict: trusted signers disagree ({said}); not vetted") for h in heads]
            continue
        heads.sort(key=lambda r: (signed_time(r), str(r.provenance.signer)), reverse=True)
        stand.append(heads[0])
        apart += [_apart(h, "agrees", f"agrees with the result that stands ({_said(heads[0])})") for h in heads[1:]]
    return stand, apart
