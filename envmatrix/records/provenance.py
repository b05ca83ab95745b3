"""Where a record came from, and whether a trusted signer vouches for it.

A record merged from another team proves nothing by itself: anyone can write `"class": "ok"`. So every
record the report reads travels with its `Provenance`: the folder or site it came from, the signer whose
attestation covers its exact bytes, and whether that signer is one the reader trusts. When trust is
asked for, only verified records are vetted; the others are shown apart (`Merged`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .record import Record, load_records


@dataclass(frozen=True)
class Provenance:
    """Where one record came from and what vouches for it."""

    source: str  # the results folder, or the site (folder or URL) it was read from
    verified: bool = False  # an attestation signed by a trusted key covers this record's exact bytes
    signer: str | None = None  # keyid of the key whose signature checked (trusted or not); None: unsigned
    note: str = ""  # why it is not verified: "not signed", "signer not trusted", "altered after signing", ...
    attestation_sha256: str | None = None  # digest of the DSSE envelope that covers the record
    attestation: str | None = None  # where that envelope is
    standing: str = ""  # a verified record that does not stand: "superseded", "conflict" or "agrees" (records/standing.py)

    def as_dict(self) -> dict[str, object]:
        """The `provenance` of a results.json row."""
        return {
            "verified": self.verified,
            "signer": self.signer,
            "source": self.source,
            "note": self.note,
            "attestation_sha256": self.attestation_sha256,
            "attestation": self.attestation,
            "standing": self.standing or None,
        }

    def text(self) -> str:
        """One line for a table cell's title, its details and the apart list."""
        if self.verified:
            why = f"; {self.note}" if self.standing else ""
            return f"verified: signed by {str(self.signer)[:16]}, a key you trust; from {self.source}{why}"
        if self.signer:
            return f"signed by {self.signer[:16]}" + (f", not verified: {self.note}" if self.note else "") + f"; from {self.source}"
        return f"{self.note or 'not signed'}; from {self.source}"


@dataclass(frozen=True)
class Sourced:
    """A record with its provenance."""

    record: Record
    provenance: Provenance


@dataclass(frozen=True)
class Merged:
    """Records from several folders and sites, read together. Without trust every record counts (as
    folders always merged; a later source's record of a cell wins, a verified one over one that is not);
    with trust (`trusted` non-empty) only verified ones count, by records/standing.py (the newest signed
    result per signer stands, signers that disagree are a conflict), and the rest are shown apart."""

    rows: tuple[Sourced, ...]
    trusted: tuple[str, ...] = ()  # keyids of the keys the reader trusts
    problems: tuple[str, ...] = ()  # sites that broke a bound or served something unusable

    def _counts(self, row: Sourced) -> bool:
        return row.provenance.verified or not self.trusted

    def _latest(self, rows: Iterable[Sourced]) -> list[Sourced]:
        by_id: dict[str, Sourced] = {}
        for row in rows:
            held = by_id.get(row.record.id)
            if held is None or row.provenance.verified or not held.provenance.verified:
                by_id[row.record.id] = row
        return list(by_id.values())

    def _standing(self) -> tuple[list[Sourced], list[Sourced]]:
        from .standing import standing  # the rule's one owner

        return standing(r for r in self.rows if self._counts(r))

    @property
    def counted(self) -> list[Sourced]:
        """The records findings, vetting and locks stand on, one per cell."""
        if self.trusted:
            return self._standing()[0]
        return self._latest(r for r in self.rows if self._counts(r))

    @property
    def apart(self) -> list[Sourced]:
        """Records not verified against a trusted signer, when trust was asked for, and verified ones that do not
        stand (superseded, in conflict, agreeing with the one that stands): shown, never vetted."""
        unverified = self._latest(r for r in self.rows if not self._counts(r))
        return [*self._standing()[1], *unverified] if self.trusted else unverified

    def trouble(self, held: str) -> str:
        """The problems as one message for the end of a command: how many, each on its own line, and what was kept."""
        lines = "\n".join(f"  {p}" for p in self.problems)
        return f"{len(self.problems)} problem(s) reading the sites; {held}:\n{lines}"

    @property
    def records(self) -> list[Record]:
        return [r.record for r in self.counted]

    def provenance(self) -> dict[str, Provenance]:
        """Each counted record's provenance by cell id."""
        return {r.record.id: r.provenance for r in self.counted}


def from_folders(folders: Iterable[Path], warn: Callable[[str], None] | None = None) -> Merged:
    """The records of plain results folders, unsigned and counted as folders always were (a bad file is
    skipped and `warn` told why; a later folder's record of a cell wins)."""
    rows = (Sourced(rec, Provenance(str(folder), note="not signed")) for folder in folders for rec in load_records(folder, warn=warn))
    return Merged(tuple(rows))
