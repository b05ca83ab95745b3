"""Keys, DSSE envelopes and in-toto statements: what is signed, what verifies, and what does not."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from records_factory import make_record

from envmatrix.errors import InputError
from envmatrix.share import dsse
from envmatrix.share.keys import PublicKey, keyid, load_private_key, load_public_key, load_trusted, public_key_from_pem, public_pem
from envmatrix.share.statement import STATEMENT, TEST_RESULT, StatementError, covered_digest, encode, passed, result_predicate, statement

OPENSSL = shutil.which("openssl")


def public(key: Ed25519PrivateKey, name: str = "k") -> PublicKey:
    return public_key_from_pem(public_pem(key.public_key()), name)


def write_pem(path: Path, key: Ed25519PrivateKey) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path


# ---- DSSE ----------------------------------------------------------------------------------------


def test_pae_matches_the_dsse_spec_test_vector() -> None:
    """secure-systems-lab/dsse protocol.md: PAE of type http://example.com/HelloWorld and body `hello world`."""
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert dsse.pae("t", b"") == b"DSSEv1 1 t 0 "
    assert dsse.pae("é", b"x") == b"DSSEv1 2 \xc3\xa9 1 x"  # byte lengths, not characters


def test_signed_envelope_verifies_with_its_key_only() -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    envelope = dsse.sign(b'{"a": 1}', key)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert base64.b64decode(envelope["payload"]) == b'{"a": 1}'
    assert envelope["signatures"][0]["keyid"] == keyid(key.public_key())
    opened = dsse.parse(json.loads(json.dumps(envelope)), "e")
    assert dsse.signer(opened, [public(other), public(key, "mine")]) is not None
    assert dsse.signer(opened, [public(key, "mine")]).name == "mine"  # type: ignore[union-attr]
    assert dsse.signer(opened, [public(other)]) is None


def test_the_signature_covers_payload_and_type() -> None:
    key = Ed25519PrivateKey.generate()
    envelope = dsse.sign(b'{"class": "nan_loss"}', key)
    forged = {**envelope, "payload": base64.b64encode(b'{"class": "ok"}').decode()}
    assert dsse.signer(dsse.parse(forged, "e"), [public(key)]) is None
    retyped = {**envelope, "payloadType": "application/json"}
    assert dsse.signer(dsse.parse(retyped, "e"), [public(key)]) is None


def test_keyid_is_only_a_hint_and_url_safe_base64_is_accepted() -> None:
    key = Ed25519PrivateKey.generate()
    body = bytes(range(250)) * 3  # makes + and / in standard base64
    envelope = dsse.sign(body, key)
    envelope["signatures"][0]["keyid"] = "someone-else"
    envelope["payload"] = base64.urlsafe_b64encode(body).decode()
    envelope["signatures"][0]["sig"] = base64.urlsafe_b64encode(base64.b64decode(envelope["signatures"][0]["sig"])).decode()
    opened = dsse.parse(envelope, "e")
    assert opened.body == body and dsse.signer(opened, [public(key)]) is not None


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ([], "expected a JSON object"),
        ({"payload": "e30="}, "payloadType"),
        ({"payloadType": "t", "payload": "e30=", "signatures": []}, "signatures"),
        ({"payloadType": "t", "payload": "e30=", "signatures": [{"sig": "!!!"}]}, "not base64"),
        ({"payloadType": "t", "payload": 7, "signatures": [{"sig": "AA=="}]}, "base64 string"),
        ({"payloadType": "t", "payload": "e30=", "signatures": [{"sig": "AA=="}] * 17}, "1 to 16"),
    ],
)
def test_malformed_envelopes_are_refused_with_the_field(data: object, says: str) -> None:
    with pytest.raises(dsse.EnvelopeError, match=says):
        dsse.parse(data, "att.json")


# ---- keys ----------------------------------------------------------------------------------------


@pytest.mark.skipif(OPENSSL is None, reason="needs the openssl command (Debian: apt-get install openssl)")
def test_keys_as_openssl_writes_them_sign_and_verify_and_the_keyid_is_openssls_der_digest(tmp_path: Path) -> None:
    assert OPENSSL is not None
    subprocess.run([OPENSSL, "genpkey", "-algorithm", "ed25519", "-out", str(tmp_path / "k.pem")], check=True, capture_output=True)
    subprocess.run([OPENSSL, "pkey", "-in", str(tmp_path / "k.pem"), "-pubout", "-out", str(tmp_path / "k.pub")], check=True, capture_output=True)
    der = subprocess.run([OPENSSL, "pkey", "-pubin", "-in", str(tmp_path / "k.pub"), "-outform", "DER"], check=True, capture_output=True).stdout
    private = load_private_key(tmp_path / "k.pem")
    trusted = load_public_key(tmp_path / "k.pub")
    assert trusted.keyid == hashlib.sha256(der).hexdigest() == keyid(private.public_key())
    assert dsse.signer(dsse.parse(dsse.sign(b"x", private), "e"), [trusted]) == trusted


def test_key_files_that_are_not_usable_say_what_to_do(tmp_path: Path) -> None:
    ed = write_pem(tmp_path / "ed.pem", Ed25519PrivateKey.generate())
    with pytest.raises(InputError, match="a private key; trust the public half"):
        load_public_key(ed)
    encrypted = tmp_path / "enc.pem"
    encrypted.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw"))
    )
    with pytest.raises(InputError, match="encrypted"):
        load_private_key(encrypted)
    ecdsa = tmp_path / "ec.pem"
    p256 = ec.generate_private_key(ec.SECP256R1())
    ecdsa.write_bytes(p256.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    with pytest.raises(InputError, match="ed25519 only"):
        load_private_key(ecdsa)
    (tmp_path / "junk.pub").write_text("hello")
    with pytest.raises(InputError, match="not a PEM public key"):
        load_public_key(tmp_path / "junk.pub")
    (tmp_path / "big.pub").write_bytes(b"x" * 100_000)
    with pytest.raises(InputError, match="more than a PEM key may hold"):
        load_public_key(tmp_path / "big.pub")
    with pytest.raises(InputError, match="openssl genpkey -algorithm ed25519"):
        load_private_key(tmp_path / "missing.pem")


def test_the_same_key_trusted_twice_counts_once(tmp_path: Path) -> None:
    pub = tmp_path / "k.pub"
    pub.write_bytes(public_pem(Ed25519PrivateKey.generate().public_key()))
    assert len(load_trusted([str(pub), str(pub)])) == 1


# ---- statements ----------------------------------------------------------------------------------


def test_a_cell_passes_when_healthy_and_ok_or_a_control_that_reproduced() -> None:
    assert passed(make_record("ok")) is True
    assert passed(make_record("nan_loss")) is False
    assert passed(make_record("zero_grad", scenario="ctl", expect="zero_grad")) is True
    assert passed(make_record("ok", scenario="ctl", expect="zero_grad")) is False  # the detector is broken there
    assert passed(make_record("skipped")) is None


def test_statement_is_a_test_result_about_the_record_and_its_lock() -> None:
    rec = make_record("grad_lost", scenario="frozen-emb")
    data = statement(rec, {"records/a.json": b"RECORD", "locks/e/pylock.toml": b"LOCK"}, "https://site/records/a.json")
    assert data["_type"] == STATEMENT and data["predicateType"] == TEST_RESULT
    assert data["subject"] == [
        {"name": "records/a.json", "digest": {"sha256": hashlib.sha256(b"RECORD").hexdigest()}},
        {"name": "locks/e/pylock.toml", "digest": {"sha256": hashlib.sha256(b"LOCK").hexdigest()}},
    ]
    predicate = data["predicate"]
    assert predicate["result"] == "fail" and predicate["failedTests"] == [rec.id] and predicate["passedTests"] == []
    assert predicate["url"] == "https://site/records/a.json"
    (config,) = predicate["configuration"]
    assert config["name"] == rec.id and config["annotations"]["outcome"] == "grad_lost"
    assert config["annotations"]["cell"]["transformers"] == rec.cell.transformers and len(config["digest"]["sha256"]) == 64
    assert covered_digest(encode(data), "records/a.json", "s") == hashlib.sha256(b"RECORD").hexdigest()
    assert covered_digest(encode(data), "records/b.json", "s") is None


def test_a_whole_folder_predicate_passes_only_when_every_cell_does() -> None:
    ok, ctl = make_record("ok"), make_record("zero_grad", scenario="ctl", expect="zero_grad")
    assert result_predicate([ok, ctl], None)["result"] == "pass"
    mixed = result_predicate([ok, make_record("skipped", scenario="s2")], None)
    assert mixed["result"] == "fail" and mixed["warnedTests"] == [f"{ok.env}/s2"] and "url" not in mixed


@pytest.mark.parametrize("body", [b"not json", b"[]", json.dumps({"_type": STATEMENT, "predicateType": "https://slsa.dev/provenance/v1"}).encode()])
def test_a_payload_that_is_not_a_test_result_statement_is_refused(body: bytes) -> None:
    with pytest.raises(StatementError):
        covered_digest(body, "records/a.json", "att")
