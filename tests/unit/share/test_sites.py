"""Publish a site, serve it on loopback with a real HTTP server, read it back: verified, altered, untrusted,
unsigned. Also the report and lock commands on merged sites, and the merge rule itself."""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from records_factory import make_record
from site_servers import serve_folder

from envmatrix.cli import main
from envmatrix.errors import InputError, OutputError
from envmatrix.outputs.lock import envmatrix_table, pylock_toml
from envmatrix.outputs.vetting import vetted_environments
from envmatrix.records.provenance import Merged, Provenance, Sourced
from envmatrix.records.record import Record, cell_stem, write_record
from envmatrix.share.keys import PublicKey, public_key_from_pem, public_pem
from envmatrix.share.limits import Limits
from envmatrix.share.merge import gather
from envmatrix.share.publish import publish
from envmatrix.share.site import parse_index

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TF = {"A": "4.57.6", "B": "5.23.0"}


def runner_records(which: str) -> list[Record]:
    """What one runner ran: a healthy ok cell, a reproduced control (so its environment is vetted), a failure."""
    common = {"torch": "2.13.0", "cuda": "none", "gpu": "cpu", "transformers": TF[which]}
    return [
        make_record("ok", **common),
        make_record("zero_grad", scenario="ctl-zero-grad", expect="zero_grad", **common),
        make_record("grad_lost", scenario="frozen-emb", **common),
    ]


def results(tmp_path: Path, which: str) -> Path:
    folder = tmp_path / f"runner{which}" / "results"
    for rec in runner_records(which):
        write_record(folder / f"{cell_stem(rec.id)}.json", rec)
    return folder


def keypair(tmp_path: Path, name: str) -> tuple[Ed25519PrivateKey, Path]:
    key = Ed25519PrivateKey.generate()
    (tmp_path / f"{name}.pub").write_bytes(public_pem(key.public_key()))
    return key, tmp_path / f"{name}.pub"


def trusted(*paths: Path) -> list[PublicKey]:
    return [public_key_from_pem(p.read_bytes(), str(p)) for p in paths]


@pytest.fixture
def sites(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """Two runners' sites, each signed with its own key: (siteA, siteB, keyA.pub, keyB.pub)."""
    key_a, pub_a = keypair(tmp_path, "keyA")
    key_b, pub_b = keypair(tmp_path, "keyB")
    publish([results(tmp_path, "A")], tmp_path / "siteA", key_a, print)
    publish([results(tmp_path, "B")], tmp_path / "siteB", key_b, print)
    return tmp_path / "siteA", tmp_path / "siteB", pub_a, pub_b


# ---- what publish writes ---------------------------------------------------------------------------


def test_publish_writes_records_byte_for_byte_an_index_and_signed_statements(tmp_path: Path) -> None:
    folder = results(tmp_path, "A")
    env = runner_records("A")[0].env
    (tmp_path / "runnerA" / "locks" / env).mkdir(parents=True)
    (tmp_path / "runnerA" / "locks" / env / "pylock.toml").write_text('lock-version = "1.0"\n')
    key, _ = keypair(tmp_path, "k")
    done = publish([folder], tmp_path / "site", key, print, site_url="https://team.example/matrix/")
    site = tmp_path / "site"
    index = json.loads((site / "index.json").read_text())
    assert index["site_version"] == 1 and index["record_version"] == 2 and index["envmatrix"]
    assert index["signer"]["keyid"] == done.keyid and (site / "key.pub").read_bytes() == public_pem(key.public_key())
    assert len(index["records"]) == 3 and done.locks == 1
    for entry in index["records"]:
        raw = (folder / Path(entry["path"]).name).read_bytes()
        assert (site / entry["path"]).read_bytes() == raw and entry["sha256"] == hashlib.sha256(raw).hexdigest()
        envelope = json.loads((site / entry["attestation"]).read_text())
        statement = json.loads(base64.b64decode(envelope["payload"]))
        subjects = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
        assert subjects[entry["path"]] == entry["sha256"]
        assert subjects[entry["lock"]] == hashlib.sha256(b'lock-version = "1.0"\n').hexdigest()
        assert statement["predicate"]["url"] == f"https://team.example/matrix/{entry['path']}"
    predicate = json.loads((site / "test-result.json").read_text())
    assert predicate["result"] == "fail" and len(predicate["passedTests"]) == 2 and len(predicate["failedTests"]) == 1
    page = (site / "index.html").read_text()
    assert page.count('data-provenance="signed"') == 3 and f"locks/{env}/requirements.lock" in page


def test_publish_unsigned_replaces_an_earlier_site_and_refuses_a_folder_that_is_not_one(tmp_path: Path) -> None:
    folder = results(tmp_path, "A")
    site = tmp_path / "site"
    publish([folder], site, None, print)
    (site / "records" / "stale.json").write_text("{}")
    publish([folder], site, None, print)
    assert not (site / "records" / "stale.json").exists()
    assert all(e["attestation"] is None for e in json.loads((site / "index.json").read_text())["records"])
    assert not (site / "key.pub").exists()
    with pytest.raises(OutputError, match="a folder envmatrix did not write"):
        publish([folder], tmp_path / "runnerA", None, print)  # would have replaced the runner's own folder
    assert (tmp_path / "runnerA" / "results").is_dir()
    with pytest.raises(InputError, match="nothing to publish"):
        publish([tmp_path / "site" / "attestations"], tmp_path / "other", None, print)


# ---- reading sites back over loopback HTTP ---------------------------------------------------------


def read(sources: list[str], keys: list[PublicKey]) -> tuple[Merged, list[str]]:
    warnings: list[str] = []
    return gather(sources, keys, warnings.append), warnings


def test_two_sites_over_http_every_record_verified(sites: tuple[Path, Path, Path, Path]) -> None:
    site_a, site_b, pub_a, pub_b = sites
    with serve_folder(site_a) as url_a, serve_folder(site_b) as url_b:
        merged, warnings = read([url_a, url_b], trusted(pub_a, pub_b))
    assert warnings == [] and merged.problems == () and merged.apart == []
    assert len(merged.counted) == 6 and all(r.provenance.verified for r in merged.counted)
    signers = {r.provenance.source: r.provenance.signer for r in merged.counted}
    assert signers == {url_a: trusted(pub_a)[0].keyid, url_b: trusted(pub_b)[0].keyid}
    assert all(r.provenance.attestation and r.provenance.attestation.startswith(r.provenance.source) for r in merged.counted)
    assert {v.cell.transformers for v in vetted_environments(merged.records)} == {"4.57.6", "5.23.0"}


def test_a_site_url_may_name_its_folder_with_or_without_slash_or_its_index(sites: tuple[Path, Path, Path, Path]) -> None:
    site_a, _, pub_a, _ = sites
    with serve_folder(site_a.parent) as url:
        for given in (f"{url}siteA", f"{url}siteA/", f"{url}siteA/index.json"):
            merged, warnings = read([given], trusted(pub_a))
            assert warnings == [] and len(merged.counted) == 3 and all(r.provenance.verified for r in merged.counted), given
            assert {r.provenance.source for r in merged.counted} == {f"{url}siteA/"}


def test_a_record_altered_after_signing_is_named_and_not_verified(sites: tuple[Path, Path, Path, Path]) -> None:
    site_a, _, pub_a, _ = sites
    victim = next((site_a / "records").glob("*frozen-emb.json"))
    data = json.loads(victim.read_text())
    data["outcome"]["class"] = "ok"
    victim.write_text(json.dumps(data))
    with serve_folder(site_a) as url:
        merged, warnings = read([url], trusted(pub_a))
    assert len(warnings) == 1 and victim.name in warnings[0] and "altered after signing" in warnings[0]
    (apart,) = merged.apart
    assert apart.record.id.endswith("/frozen-emb") and not apart.provenance.verified and apart.provenance.note == "altered after signing"
    assert all(r.provenance.verified for r in merged.counted) and len(merged.counted) == 2
    unasked, warned = read([str(site_a)], [])  # from its folder, without trust: still named and not verified, but counted
    assert any("altered after signing" in w for w in warned) and not any(r.provenance.verified for r in unasked.counted) and len(unasked.counted) == 3


def test_a_signer_not_trusted_is_shown_apart_and_its_environments_never_vetted(sites: tuple[Path, Path, Path, Path]) -> None:
    site_a, site_b, pub_a, _ = sites
    with serve_folder(site_a) as url_a, serve_folder(site_b) as url_b:
        merged, warnings = read([url_a, url_b], trusted(pub_a))
    assert warnings == []
    assert len(merged.apart) == 3 and {r.provenance.note for r in merged.apart} == {"signer not trusted"}
    assert all(r.provenance.signer for r in merged.apart)  # signed, by a key the reader did not bring
    assert {v.cell.transformers for v in vetted_environments(merged.records)} == {"4.57.6"}


def test_forged_statement_and_swapped_attestation_do_not_verify(sites: tuple[Path, Path, Path, Path]) -> None:
    site_a, _, pub_a, _ = sites
    atts = sorted((site_a / "attestations").glob("*.json"))
    forged = json.loads(atts[0].read_text())
    statement = json.loads(base64.b64decode(forged["payload"]))
    statement["predicate"]["result"] = "pass"
    forged["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    atts[0].write_text(json.dumps(forged))
    atts[2].write_bytes(atts[1].read_bytes())  # a genuine signature, over another record
    merged, warnings = read([str(site_a)], trusted(pub_a))
    notes = sorted(r.provenance.note for r in merged.apart)
    assert notes == ["altered after signing", "signature does not verify"], notes
    assert len(warnings) == 2 and len(merged.counted) == 1


def test_an_index_pointing_outside_the_site_is_refused() -> None:
    for path in ("../../etc/passwd", "records/../../x.json", "/etc/passwd.json", "https://elsewhere/records/a.json", "attestations/a.json"):
        raw = json.dumps({"site_version": 1, "records": [{"path": path}]}).encode()
        with pytest.raises(InputError, match="not a record path inside the site"):
            parse_index(raw, "index.json", Limits())


def test_unsigned_folders_and_sites_merge_as_before_without_trust(tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish([results(tmp_path, "A")], site, None, print)
    folder = results(tmp_path, "B")
    merged, warnings = read([str(folder), str(site)], [])
    assert warnings == [] and len(merged.counted) == 6 and merged.apart == []
    assert {r.provenance.note for r in merged.counted} == {"not signed"} and {r.provenance.source for r in merged.counted} == {str(folder), str(site)}
    assert merged.counted[0].provenance.text() == f"not signed; from {folder}"


def test_a_verified_record_wins_over_an_unverified_one_of_the_same_cell() -> None:
    rec = make_record("ok")
    verified, plain = Provenance("a", verified=True, signer="k"), Provenance("b")
    for rows in ([Sourced(rec, verified), Sourced(rec, plain)], [Sourced(rec, plain), Sourced(rec, verified)]):
        merged = Merged(tuple(rows), trusted=("k",))
        assert [r.provenance for r in merged.counted] == [verified] and [r.provenance for r in merged.apart] == [plain]
    assert [r.provenance for r in Merged((Sourced(rec, plain), Sourced(rec, Provenance("c")))).counted] == [Provenance("c")]  # later wins


# ---- the commands ----------------------------------------------------------------------------------


def test_report_command_says_each_rows_provenance_and_shows_untrusted_apart(
    sites: tuple[Path, Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site_a, site_b, pub_a, pub_b = sites
    with serve_folder(site_a) as url_a, serve_folder(site_b) as url_b:
        assert main(["report", "--results", url_a, "--results", url_b, "--trust", str(pub_a), "--trust", str(pub_b), "--out", str(tmp_path / "all")]) == 0
        assert main(["report", "--results", url_a, "--results", url_b, "--trust", str(pub_a), "--out", str(tmp_path / "one")]) == 0
    out = capsys.readouterr().out
    assert "6 of 6 counted records verified" in out and "shown apart, never vetted: 3 (signer not trusted 3)" in out
    rows = json.loads((tmp_path / "all" / "results.json").read_text())
    assert len(rows) == 6 and all(r["provenance"]["verified"] and r["provenance"]["signer"] and r["provenance"]["source"] for r in rows)
    assert (tmp_path / "all" / "matrix.html").read_text().count('data-provenance="verified"') == 6
    one = json.loads((tmp_path / "one" / "results.json").read_text())
    assert sorted(r["provenance"]["verified"] for r in one) == [False] * 3 + [True] * 3
    vetted = json.loads((tmp_path / "one" / "vetted.json").read_text())
    assert [v["transformers"] for v in vetted["vetted"]] == ["4.57.6"] and vetted["trusted_signers"] == [trusted(pub_a)[0].keyid]
    page = (tmp_path / "one" / "matrix.html").read_text()
    assert 'id="apart"' in page and page.count("signer not trusted") == 3 and "5.23.0" not in page.split('id="apart"')[0].split("<h2>All cells")[1]


def test_lock_stands_on_verified_records_and_names_their_attestations(sites: tuple[Path, Path, Path, Path]) -> None:
    site_a, site_b, pub_a, _ = sites
    merged, _ = read([str(site_a), str(site_b)], trusted(pub_a))
    (choice,) = vetted_environments(merged.records)
    text = pylock_toml([], choice.python, envmatrix_table(choice, merged.records, merged.provenance()))
    tool = tomllib.loads(text)["tool"]["envmatrix"]
    assert tool["environment"] == choice.env and tool["vetted-for"] == ["fp32-sdpa"] and tool["controls-reproduced"] == ["ctl-zero-grad"]
    digests = {a["cell"]: a["sha256"] for a in tool["attestations"]}
    for cell in (f"{choice.env}/fp32-sdpa", f"{choice.env}/ctl-zero-grad"):
        assert digests[cell] == hashlib.sha256((site_a / "attestations" / f"{cell_stem(cell)}.json").read_bytes()).hexdigest()
    assert all(a["verified"] and a["signer"] == trusted(pub_a)[0].keyid for a in tool["attestations"])
    assert f"{choice.env}/frozen-emb" not in digests  # a failing cell is not what the vetting stands on
    plain = tomllib.loads(pylock_toml([], "3.11", envmatrix_table(choice, merged.records, {})))["tool"]["envmatrix"]
    assert plain["attestations"] == []


Sites = tuple[Path, Path, Path, Path]


def test_lock_best_with_trust_picks_only_among_verified_environments(sites: Sites, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """B's environment is newer (transformers 5.23.0), but its signer is not trusted: --best picks A's. (The
    fixture records hold no freeze, so the lock stops right after the choice, naming the environment chosen.)"""
    site_a, site_b, pub_a, _ = sites
    both = ["--scenario", "fp32-sdpa", "--results", str(site_a), "--results", str(site_b), "--out", str(tmp_path / "o")]
    assert main(["lock", "--best", "cpu", *both, "--trust", str(pub_a)]) == 2
    assert "tf4.57.6" in (err := capsys.readouterr().err) and "no freeze" in err and "tf5.23.0" not in err
    assert main(["lock", "--best", "cpu", *both]) == 2  # without trust every record counts: B's newer environment is chosen
    assert "tf5.23.0" in (err := capsys.readouterr().err) and "no freeze" in err


@pytest.fixture
def write_key(tmp_path: Path) -> Callable[[], Path]:
    def make() -> Path:
        path = tmp_path / "signing.pem"
        path.write_bytes(
            Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        )
        return path

    return make


def test_publish_command_signs_and_says_how_to_verify(tmp_path: Path, write_key: Callable[[], Path], capsys: pytest.CaptureFixture[str]) -> None:
    folder = results(tmp_path, "A")
    assert main(["publish", "--results", str(folder), "--out", str(tmp_path / "site"), "--sign-key", str(write_key())]) == 0
    out = capsys.readouterr().out
    assert "3 records" in out and "signed by" in out and "--trust" in out
    assert main(["publish", "--results", str(folder), "--out", str(tmp_path / "s2"), "--site-url", "ftp://x"]) == 2
    assert main(["report", "--results", "ftp://x/", "--out", str(tmp_path / "r")]) == 2
    assert "only http:// and https://" in capsys.readouterr().err
