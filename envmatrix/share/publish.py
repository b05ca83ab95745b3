"""`envmatrix publish`: results folders → a static site any web server or GitHub Pages can host.

    SITE/index.html                the HTML table (the report's page)
    SITE/index.json                what the site holds: envmatrix and record versions, each record's path,
                                   digest, attestation and lock
    SITE/records/<cell>.json       every record, byte for byte as the runner wrote it (digests hold)
    SITE/attestations/<cell>.json  with a key: a DSSE envelope of the record's in-toto Test Result statement
    SITE/key.pub                   with a key: its public half (never trusted by readers: they bring their own)
    SITE/locks/<env>/              the environment's lock, where `envmatrix lock` wrote one beside the results
    SITE/test-result.json          the Test Result predicate over every record, for a keyless attestation
                                   (GitHub's actions/attest) of all record files at once

The site is built in a temporary folder beside SITE and swapped in whole by the one writer (outputs/writer.py),
so a web server never serves a half-written site, and an earlier folder at SITE is replaced only when envmatrix
wrote it (its marker file); any other non-empty folder is refused, never emptied. Files inside
that folder are written plainly (no fsync and rename each): nothing reads them before the swap, and a
per-file fsync was half the time of a publish.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from probes import untrusted

from .. import __version__
from ..errors import InputError, OutputError
from ..jsonio import read_bytes_bounded
from ..outputs.report import render_html
from ..outputs.writer import folder_target, write_folder
from ..records.provenance import Provenance
from ..records.record import MAX_RECORD_BYTES, RECORD_VERSION, Record, RecordError, cell_stem, record_files, record_from_bytes
from . import badge, dsse
from .keys import keyid, public_pem
from .site import INDEX, SITE_VERSION
from .statement import encode, result_predicate, sha256, statement

LOCK_FILES = ("pylock.toml", "requirements.lock", "sources.json")
MAX_LOCK_BYTES = untrusted.LOCK.max_bytes

Warn = Callable[[str], None]
Found = dict[str, tuple[Record, bytes, Path]]  # cell id -> (record, its file's bytes, its results folder)


@dataclass(frozen=True)
class Published:
    """What a publish wrote."""

    out: Path
    records: int
    locks: int
    keyid: str | None


def collect(results: list[Path], warn: Warn) -> Found:
    """Every valid record of the folders with its exact bytes (a later folder's record of a cell wins);
    a bad file is skipped with a warning, as the report skips it."""
    found: Found = {}
    for folder in results:
        for path in record_files(folder):
            try:
                raw = read_bytes_bounded(path, MAX_RECORD_BYTES, "a record", RecordError)
                record = record_from_bytes(raw, str(path))
            except RecordError as exc:
                warn(f"skipped {exc}")
                continue
            found[record.id] = (record, raw, folder)
    return found


def _lock(folder: Path, env: str) -> dict[str, bytes]:
    """The lock files `envmatrix lock --out REPORTS` wrote for `env` beside REPORTS/results, if any."""
    where = folder.parent / "locks" / env
    files = {}
    for name in LOCK_FILES:
        with contextlib.suppress(InputError):
            files[name] = read_bytes_bounded(where / name, MAX_LOCK_BYTES, "a lock file")
    return files if "pylock.toml" in files else {}


def _put(site: Path, rel: str, data: bytes) -> None:
    """One file of the site being built."""
    path = site / rel
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write ({exc.strerror}); no site was published") from None


def _json(data: object) -> bytes:
    return json.dumps(data, indent=2).encode()


def publish(results: list[Path], out: Path, key: Ed25519PrivateKey | None, warn: Warn, site_url: str | None = None) -> Published:
    """Write the site for the records in `results` to `out`, signing each record's statement with `key`."""
    found = collect(results, warn)
    if not found:
        raise InputError(f"no records in {', '.join(map(str, results))}: nothing to publish; run the matrix first (envmatrix run)")
    folder_target(out)  # refused before any work: a folder envmatrix did not write is never emptied
    written: list[Published] = []

    def fill(staging: Path) -> None:
        entries, lock_envs = _write(staging, found, key, site_url)
        signer = {"keyid": keyid(key.public_key()), "key": "key.pub", "algorithm": "ed25519"} if key else None
        _put(
            staging,
            INDEX,
            _json(
                {
                    "site_version": SITE_VERSION,
                    "envmatrix": __version__,
                    "record_version": RECORD_VERSION,
                    "published": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                    "signer": signer,
                    "predicate": "test-result.json",
                    "records": entries,
                }
            ),
        )
        written.append(Published(out, len(entries), len(lock_envs), signer["keyid"] if signer else None))

    write_folder(out, fill, by="envmatrix publish")
    return written[0]


def _write(site: Path, found: Found, key: Ed25519PrivateKey | None, site_url: str | None) -> tuple[list[dict[str, object]], set[str]]:
    """Records, locks, attestations, the predicate and the page into `site`; the index entries."""
    entries: list[dict[str, object]] = []
    locks: dict[str, dict[str, bytes]] = {}
    records = []
    for record, raw, folder in (found[i] for i in sorted(found)):
        name = f"records/{cell_stem(record.id)}.json"
        _put(site, name, raw)
        if record.env not in locks:
            locks[record.env] = _lock(folder, record.env)
            for fname, data in locks[record.env].items():
                _put(site, f"locks/{record.env}/{fname}", data)
        subjects = {name: raw}
        lock = f"locks/{record.env}/pylock.toml" if locks[record.env] else None
        if lock:
            subjects[lock] = locks[record.env]["pylock.toml"]
        attestation = None
        if key is not None:
            attestation = f"attestations/{cell_stem(record.id)}.json"
            body = encode(statement(record, subjects, f"{site_url.rstrip('/')}/{name}" if site_url else name))
            _put(site, attestation, _json(dsse.sign(body, key)))
        entry = {"id": record.id, "path": name, "sha256": sha256(raw), "record_version": record.version, "class": record.klass}
        entries.append({**entry, "attestation": attestation, "lock": lock})
        records.append(record)
    if key is not None:
        _put(site, "key.pub", public_pem(key.public_key()))
    _put(site, "test-result.json", _json(result_predicate(records, site_url)))
    for rel, data in badge.badges(records).items():  # SITE/badges/<gpu>.svg: the table at a glance
        _put(site, rel, data)
    lock_envs = {env for env, files in locks.items() if files}
    signer = keyid(key.public_key()) if key else None
    here = "this site (readers check its records against the keys they trust)"
    provenance = {r.id: Provenance(here, signer=signer, note="" if signer else "not signed") for r in records}
    page = render_html(records, {env: f"locks/{env}" for env in sorted(lock_envs)}, provenance=provenance)
    _put(site, "index.html", page.encode())
    return entries, lock_envs
