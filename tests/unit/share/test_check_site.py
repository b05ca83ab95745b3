"""check answers from a published, signed site over loopback HTTP: a record verified against a trusted key counts and
its signer is named; a record altered after signing is not counted; the site carries a badge per GPU type."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cpu_records import cpu_records, cpu_results
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from site_servers import serve_folder

from envmatrix.cli import main
from envmatrix.share import badge
from envmatrix.share.publish import publish

BAD = "torch==2.13.0+cpu\ntransformers==4.57.6\ndeepspeed==0.15.4\n"
CELL = "cpu-torch2.13.0-tf4.57.6-fanone-deepspeed0.15.4-cpu-py3.11__zero3"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("site")
    key = Ed25519PrivateKey.generate()
    pub = tmp / "trusted.pub"
    pub.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    publish([cpu_results(tmp / "results")], tmp / "site", key, lambda _: None)
    return tmp / "site", pub


def run_check(url: str, pub: Path, tmp_path: Path) -> tuple[int, dict[str, object]]:
    (tmp_path / "r.txt").write_text(BAD)
    out = tmp_path / "answer.json"
    code = main(["check", str(tmp_path / "r.txt"), "--results", url, "--trust", str(pub), "--format", "json", "--output", str(out)])
    return code, json.loads(out.read_text())


def test_a_signed_site_over_http_answers_with_its_signer(site: tuple[Path, Path], tmp_path: Path) -> None:
    folder, pub = site
    with serve_folder(folder) as url:
        code, answer = run_check(url, pub, tmp_path)
    assert code == 1
    [bad] = answer["known_bad"]  # type: ignore[misc]
    assert bad["scenario"] == "zero3" and bad["signed"].startswith("verified: signed by")


def test_a_record_altered_after_signing_is_not_counted(site: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, pub = site
    import shutil

    copy = tmp_path / "served"
    shutil.copytree(folder, copy)
    path = copy / "records" / f"{CELL}.json"
    data = json.loads(path.read_text())
    data["outcome"]["class"] = "ok"  # someone hides the failure
    path.write_text(json.dumps(data))
    with serve_folder(copy) as url:
        code, answer = run_check(url, pub, tmp_path)
    assert code == 0 and not answer["known_bad"]
    assert not any(v["vetted"] for v in answer["vetted"])  # type: ignore[attr-defined]
    assert answer["records"] == 113 and "1 record(s) not counted" in answer["notes"][0]  # type: ignore[index]
    assert "altered after signing" in capsys.readouterr().err


def test_the_site_has_a_badge_per_gpu_type(site: tuple[Path, Path]) -> None:
    folder, _ = site
    svg = (folder / "badges" / "cpu.svg").read_text()
    vetted, bad = badge.counts(cpu_records(), "cpu")
    assert f"{vetted} vetted · {bad} known bad" in svg and vetted > 0 and bad > 0


def test_a_badge_escapes_its_text_and_colours_by_what_is_known() -> None:
    assert "&lt;b&gt;" in badge.svg("<b>", 1, 0) and badge.GREEN in badge.svg("H20", 1, 0)
    assert badge.RED in badge.svg("H20", 0, 2) and badge.AMBER in badge.svg("H20", 3, 1)
    assert badge.file_name("H20 SXM/x") == "badges/h20-sxm-x.svg"
