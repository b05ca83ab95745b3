"""Trust is monotonic (issue 42, mechanism 1; envmatrix/records/standing.py): a trusted signer's older result never
replaces its newer one, whatever order the sites are listed in; two trusted signers that disagree are a conflict,
not settled by argument order; vetting stands only on what stands. Real signed sites, read from folders and over
loopback HTTP, through the real `report` command."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from records_factory import make_record
from site_servers import serve_folder

from envmatrix.cli import main
from envmatrix.records.record import Record, cell_stem, write_record
from envmatrix.share.keys import public_key_from_pem, public_pem
from envmatrix.share.merge import gather
from envmatrix.share.publish import publish

COMMON = {"torch": "2.13.0", "cuda": "none", "gpu": "cpu", "transformers": "4.57.6"}


def at(outcome: str, when: str, **kw: str) -> Record:
    return replace(make_record(outcome, **{**COMMON, **kw}), started=when, finished=when)


def signed_site(tmp_path: Path, name: str, key: Ed25519PrivateKey, records: list[Record]) -> Path:
    folder = tmp_path / f"runner-{name}" / "results"
    for rec in records:
        write_record(folder / f"{cell_stem(rec.id)}.json", rec)
    publish([folder], tmp_path / name, key, print)
    return tmp_path / name


@pytest.fixture
def key(tmp_path: Path) -> tuple[Ed25519PrivateKey, Path]:
    k = Ed25519PrivateKey.generate()
    (tmp_path / "team.pub").write_bytes(public_pem(k.public_key()))
    return k, tmp_path / "team.pub"


def control() -> Record:
    """A reproduced control in the same environment: with an ok cell, the environment is vetted."""
    return at("zero_grad", "2026-11-01T00:00:00+00:00", scenario="ctl-zero-grad", expect="zero_grad")


@pytest.mark.parametrize("order", ["old-last", "old-first"])
def test_an_old_signed_ok_never_replaces_the_current_failure(tmp_path: Path, key: tuple[Ed25519PrivateKey, Path], order: str) -> None:
    k, pub = key
    current = signed_site(tmp_path, "current", k, [at("grad_lost", "2026-11-20T10:00:00+00:00"), control()])
    old = signed_site(tmp_path, "old", k, [at("ok", "2020-01-01T00:00:00+00:00")])
    sources = [current, old] if order == "old-last" else [old, current]
    out = tmp_path / "reports"
    assert main(["report", *(a for s in sources for a in ("--results", str(s))), "--trust", str(pub), "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())
    fp32 = [r for r in rows if r["cell"]["scenario"] == "fp32-sdpa"] if "cell" in rows[0] else [r for r in rows if r.get("scenario") == "fp32-sdpa"]
    standing = {r["provenance"]["standing"]: r for r in fp32}
    assert set(standing) == {None, "superseded"}, "one stands, the old one is shown as superseded"
    assert standing[None]["provenance"]["source"].rstrip("/").endswith("current")
    vetted = json.loads((out / "vetted.json").read_text())
    assert vetted["vetted"] == [], "the environment is not vetted on a 2020 ok"


def test_two_trusted_signers_that_disagree_are_a_conflict(tmp_path: Path) -> None:
    a, b = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    site_a = signed_site(tmp_path, "a", a, [at("ok", "2026-11-20T10:00:00+00:00")])
    site_b = signed_site(tmp_path, "b", b, [at("nan_loss", "2026-11-19T10:00:00+00:00")])
    keys = [public_key_from_pem(public_pem(k.public_key()), "k") for k in (a, b)]
    with serve_folder(site_a) as url_a, serve_folder(site_b) as url_b:
        for order in ([url_a, url_b], [url_b, url_a]):
            merged = gather(order, keys, print)
            assert merged.counted == [], "a disputed cell stands on neither signer"
            assert sorted(r.provenance.standing for r in merged.apart) == ["conflict", "conflict"]
            assert all("nan_loss" in r.provenance.note and "ok" in r.provenance.note for r in merged.apart)


def test_signers_that_agree_keep_the_newest_and_show_the_other(tmp_path: Path) -> None:
    a, b = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    site_a = signed_site(tmp_path, "a", a, [at("ok", "2026-11-20T10:00:00+00:00")])
    site_b = signed_site(tmp_path, "b", b, [at("ok", "2026-11-21T10:00:00+00:00")])
    keys = [public_key_from_pem(public_pem(k.public_key()), "k") for k in (a, b)]
    for order in ([str(site_a), str(site_b)], [str(site_b), str(site_a)]):
        merged = gather(order, keys, print)
        (stands,) = merged.counted
        assert stands.provenance.source == str(site_b) and [r.provenance.standing for r in merged.apart] == ["agrees"]


def test_a_record_without_a_time_never_replaces_one_with_it(tmp_path: Path, key: tuple[Ed25519PrivateKey, Path]) -> None:
    k, pub = key
    timed = signed_site(tmp_path, "timed", k, [at("grad_lost", "2026-11-20T10:00:00+00:00")])
    untimed = signed_site(tmp_path, "untimed", k, [replace(make_record("ok", **COMMON), started=None, finished=None)])
    merged = gather([str(timed), str(untimed)], [public_key_from_pem(pub.read_bytes(), str(pub))], print)
    assert [r.record.klass for r in merged.counted] == ["grad_lost"]
