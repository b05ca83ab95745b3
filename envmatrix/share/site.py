"""Read a published site back: its index, every record through the record's own untrusted reading, and
each record's attestation checked against the keys the reader trusts.

A record is verified only when a DSSE signature by a trusted key covers a statement whose subject is
the exact bytes served. The site's own key.pub is never trusted (anyone can publish a key); it only
tells "signed by someone you do not trust" from "the signature does not verify at all".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from probes import untrusted

from ..errors import InputError
from ..records.provenance import Provenance, Sourced
from ..records.record import RecordError, record_from_bytes
from . import dsse
from .fetch import Site, SiteError, SiteExhausted
from .keys import PublicKey, public_key_from_pem
from .limits import Limits
from .statement import StatementError, covered_digest, sha256

INDEX = "index.json"
SITE_VERSION = 1
#: Paths an index may name: under the site, no `..`, no scheme, no query.
_FILE = re.compile(r"(records|attestations)/[A-Za-z0-9][A-Za-z0-9._+-]{0,250}\.json")
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.pub")
_HEX = re.compile(r"[0-9a-f]{64}")

Warn = Callable[[str], None]


@dataclass(frozen=True)
class Entry:
    """One record an index lists: where it is and where its attestation is."""

    path: str
    attestation: str | None


@dataclass(frozen=True)
class Index:
    entries: tuple[Entry, ...]
    key: str | None  # the site's public key file, if it signed
    keyid: str | None


def parse_index(raw: bytes, where: str, limits: Limits) -> Index:
    """A site's index.json, checked: its version, and every path it names stays inside the site."""
    try:
        data = untrusted.parse_json(raw, where, untrusted.PUBLISHED_INDEX, finite=True)
    except untrusted.Refused as exc:
        raise SiteError(f"{exc}; not a site envmatrix publish wrote") from None
    version = data.get("site_version") if isinstance(data, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SiteError(f"{where}: no site_version; not a site envmatrix publish wrote")
    if data["site_version"] > SITE_VERSION:
        raise SiteError(f"{where}: site version {data['site_version']} is newer than this envmatrix reads ({SITE_VERSION}); upgrade envmatrix")
    records = data.get("records")
    if not isinstance(records, list):
        raise SiteError(f"{where}: records: expected a list")
    if len(records) > limits.records:
        raise SiteError(f"{where}: lists {len(records)} records, more than a site may ({limits.records})")
    entries = [_entry(e, f"{where}: records[{i}]") for i, e in enumerate(records)]
    signer = data.get("signer")
    key = keyid = None
    if signer is not None:
        if not isinstance(signer, dict) or not _KEY.fullmatch(str(signer.get("key"))) or not _HEX.fullmatch(str(signer.get("keyid"))):
            raise SiteError(f"{where}: signer: expected a key file name and a keyid")
        key, keyid = str(signer["key"]), str(signer["keyid"])
    return Index(tuple(entries), key, keyid)


def _entry(e: Any, where: str) -> Entry:
    if not isinstance(e, dict):
        raise SiteError(f"{where}: expected an object")
    path, attestation = e.get("path"), e.get("attestation")
    if not isinstance(path, str) or not _FILE.fullmatch(path) or not path.startswith("records/"):
        raise SiteError(f"{where}.path: {str(path)[:80]!r} is not a record path inside the site")
    if attestation is not None and (not isinstance(attestation, str) or not _FILE.fullmatch(attestation) or not attestation.startswith("attestations/")):
        raise SiteError(f"{where}.attestation: {str(attestation)[:80]!r} is not an attestation path inside the site")
    return Entry(path, attestation)


class _Reader:
    """One site's read: its files, the trusted keys, the site's own key, and what went wrong."""

    def __init__(self, site: Site, trusted: list[PublicKey], limits: Limits, warn: Warn) -> None:
        self.site = site
        self.trusted = trusted
        self.limits = limits
        self.warn = warn
        self.site_key: PublicKey | None = None
        self.problems: list[str] = []

    def problem(self, message: str) -> None:
        self.problems.append(message)

    def key(self, index: Index) -> None:
        if index.key is None:
            return
        try:
            key = public_key_from_pem(self.site.get(index.key, self.limits.key_bytes, "a public key"), self.site.where(index.key))
        except SiteExhausted:
            raise
        except InputError as exc:
            self.problem(f"{exc}; its records cannot be told apart from altered ones")
            return
        if key.keyid != index.keyid:
            self.problem(f"{self.site.where(index.key)}: its keyid is {key.keyid}, the index says {index.keyid}")
            return
        self.site_key = key

    def record(self, entry: Entry) -> Sourced | None:
        where = self.site.where(entry.path)
        try:
            raw = self.site.get(entry.path, self.limits.record_bytes, "a record")
            record = record_from_bytes(raw, where)
        except SiteExhausted:
            raise
        except (SiteError, RecordError) as exc:
            self.problem(f"skipped {exc}")
            return None
        return Sourced(record, self.provenance(entry, raw, where))

    def provenance(self, entry: Entry, raw: bytes, where: str) -> Provenance:
        source = self.site.source
        if entry.attestation is None:
            if self.site_key is not None:  # a signed site serving one record unsigned: said, not only kept apart
                self.warn(f"{where}: not signed, on a site that signs its records (added after publishing?); not verified")
            return Provenance(source, note="not signed")
        at = self.site.where(entry.attestation)
        try:
            blob = self.site.get(entry.attestation, self.limits.envelope_bytes, "an attestation")
        except SiteExhausted:
            raise
        except SiteError as exc:  # beyond a bound, missing, too slow: a problem of the site (exit 2), not only a warning
            self.problem(f"{where}: not verified: {exc}")
            return Provenance(source, note="attestation unreadable")
        try:
            envelope = dsse.parse(_json(blob, at), at)
        except InputError as exc:
            self.warn(f"{where}: not verified: {exc}")
            return Provenance(source, note="attestation unreadable")
        signed = Provenance(source, attestation_sha256=sha256(blob), attestation=at)
        key = dsse.signer(envelope, self.trusted)
        trusted = key is not None
        if key is None and self.site_key is not None:
            key = dsse.signer(envelope, [self.site_key])
        if key is None:
            self.warn(f"{where}: not verified: its attestation's signature does not verify with any trusted key nor the site's own (altered after signing?)")
            return replace(signed, note="signature does not verify")
        if envelope.payload_type != dsse.IN_TOTO:
            self.warn(f"{where}: not verified: the attestation carries {envelope.payload_type[:80]!r}, not an in-toto statement")
            return replace(signed, signer=key.keyid, note="not an in-toto statement")
        try:
            claimed = covered_digest(envelope.body, entry.path, at)
        except StatementError as exc:
            self.warn(f"{where}: not verified: {exc}")
            return replace(signed, signer=key.keyid, note="not a test result statement")
        actual = sha256(raw)
        if claimed != actual:
            self.warn(
                f"{where}: altered after signing: its sha256 is {actual}, the statement signed by {key.keyid[:16]} says "
                f"{claimed or 'nothing for this file'}; not verified"
            )
            return replace(signed, signer=key.keyid, note="altered after signing")
        if not trusted:
            return replace(signed, signer=key.keyid, note="signer not trusted")
        return replace(signed, verified=True, signer=key.keyid)


def _json(raw: bytes, where: str) -> Any:
    try:
        return untrusted.parse_json(raw, where, untrusted.ATTESTATION, finite=True)
    except untrusted.Refused as exc:
        raise dsse.EnvelopeError(str(exc)) from None


def read_site(site: Site, trusted: list[PublicKey], limits: Limits, warn: Warn) -> tuple[list[Sourced], list[str]]:
    """Every record of a site that could be read within its bounds, each with its provenance, and the
    problems met (what broke a bound, or could not be read: the caller names them all at the end). A site
    that runs out of budget keeps what was read before. `warn` hears of records that do not verify."""
    reader = _Reader(site, trusted, limits, warn)
    rows: list[Sourced] = []
    try:
        index = parse_index(site.get(INDEX, limits.index_bytes, "a site index"), site.where(INDEX), limits)
        reader.key(index)
        for entry in index.entries:
            row = reader.record(entry)
            if row is not None:
                rows.append(row)
    except SiteError as exc:
        reader.problem(f"{exc}" + (f" ({len(rows)} records read before are kept)" if rows else ""))
    finally:
        site.close()
    return rows, reader.problems
