"""What a signed site can do wrong is said (issue 42, mechanism 8): an attestation beyond its 1 MiB bound is a
problem of the site (exit 2), not a warning with exit 0; a record served unsigned by a site that signs is said on
stderr, not only kept apart; a key file with two PEM blocks is refused rather than silently using the first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from records_factory import make_record

from envmatrix.cli import main
from envmatrix.errors import InputError
from envmatrix.records.record import cell_stem, write_record
from envmatrix.share.keys import load_public_key, public_key_from_pem, public_pem
from envmatrix.share.limits import MAX_ENVELOPE_BYTES
from envmatrix.share.merge import gather
from envmatrix.share.publish import publish


def signed(tmp_path: Path) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.generate()
    for outcome, scenario in (("ok", "fp32-sdpa"), ("nan_loss", "bf16-sdpa")):
        rec = make_record(outcome, scenario=scenario, gpu="cpu", cuda="none")
        write_record(tmp_path / "results" / f"{cell_stem(rec.id)}.json", rec)
    publish([tmp_path / "results"], tmp_path / "site", key, print)
    (tmp_path / "team.pub").write_bytes(public_pem(key.public_key()))
    return tmp_path / "site", tmp_path / "team.pub"


def test_an_attestation_beyond_its_bound_fails_the_report(tmp_path: Path) -> None:
    site, pub = signed(tmp_path)
    index = json.loads((site / "index.json").read_text())
    (site / index["records"][0]["attestation"]).write_bytes(b" " * (MAX_ENVELOPE_BYTES + 1))
    merged = gather([str(site)], [load_public_key(pub)], print)
    assert any("more than an attestation may hold" in p or "1 MiB" in p for p in merged.problems), merged.problems
    assert main(["report", "--results", str(site), "--trust", str(pub), "--out", str(tmp_path / "r")]) == 2


def test_an_unsigned_record_on_a_signed_site_is_said(tmp_path: Path) -> None:
    site, pub = signed(tmp_path)
    index = json.loads((site / "index.json").read_text())
    index["records"][0]["attestation"] = None
    (site / "index.json").write_text(json.dumps(index))
    said: list[str] = []
    merged = gather([str(site)], [load_public_key(pub)], said.append)
    assert any("not signed, on a site that signs" in s for s in said)
    assert [r.provenance.note for r in merged.apart] == ["not signed"]


def test_a_key_file_with_two_keys_is_refused(tmp_path: Path) -> None:
    two = public_pem(Ed25519PrivateKey.generate().public_key()) + public_pem(Ed25519PrivateKey.generate().public_key())
    with pytest.raises(InputError, match="2 PEM blocks"):
        public_key_from_pem(two, "two.pub")
