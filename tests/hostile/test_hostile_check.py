"""Hostile input to `envmatrix check`: sites that misbehave, records whose evidence would drive a terminal, files that are
not requirements, outputs that are not files. Each ends in bounds, in one clear line, with its exit status; what could
be read is still answered."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from bounded import assert_clean_failure, run_bounded
from records_factory import make_record
from site_servers import serve_folder, serve_hostile

from envmatrix.records.record import cell_stem, write_record
from envmatrix.share.publish import publish

ESCAPES = "\x1b[2J\x1b]8;;https://evil.example\x07click\x1b]8;;\x07 \x9b31m"
STACK = "torch==2.6.0+cpu\ntransformers==4.51.3\n"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two cells of one scenario: nan_loss on transformers 4.51.3 (its evidence full of escapes), ok on 4.57.6."""
    folder = tmp_path_factory.mktemp("hostile-check") / "results"
    bad = make_record("nan_loss", gpu="cpu", cuda="none", evidence=f"loss nan {ESCAPES}")
    good = make_record("ok", gpu="cpu", cuda="none", transformers="4.57.6")
    for rec in (bad, good):
        write_record(folder / f"{cell_stem(rec.id)}.json", rec)
    return folder


def test_evidence_from_a_record_cannot_drive_the_terminal(results: Path, tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text(STACK)
    ended = run_bounded(["check", str(tmp_path / "r.txt"), "--results", str(results)])
    assert ended.status == 1 and "KNOWN BAD" in ended.stdout and "loss nan" in ended.stdout
    assert not any(c in ended.stdout for c in "\x1b\x07\x9b"), ended.stdout
    sarif = run_bounded(["check", str(tmp_path / "r.txt"), "--results", str(results), "--format", "sarif"])
    assert sarif.status == 1 and "\x1b" not in sarif.stdout and ESCAPES in json.loads(sarif.stdout)["runs"][0]["results"][0]["message"]["text"]


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serve_hostile() as url:
        yield url


@pytest.mark.parametrize(("site", "says"), [("records/", "not JSON"), ("loop/", "a redirect loop"), ("huge/", "larger than a site index can be")])
def test_a_hostile_site_beside_a_good_one_is_named_and_the_rest_answered(results: Path, hostile: str, site: str, says: str, tmp_path: Path) -> None:
    publish([results], tmp_path / "site", None, lambda _: None)
    (tmp_path / "r.txt").write_text(STACK)
    with serve_folder(tmp_path / "site") as good:
        ended = run_bounded(["check", str(tmp_path / "r.txt"), "--results", good, "--results", hostile + site])
    assert_clean_failure(ended, 2, says=says)
    assert "KNOWN BAD" in ended.stdout and ended.seconds < 20, "the good site's records are answered, then the problem is the exit status"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("torch==2.6.0\x1b[31m\n", "is not a requirement"),
        ("-e ../../..\n--not-an-option x\n", "unknown option"),
        ("torch==2.6.0\ntorch==2.7.0\n", "pinned again"),
        ("\xff\xfe" + "torch==2.6.0\n", ""),
    ],
)
def test_a_file_that_is_not_a_stack_is_bad_input_in_one_line(results: Path, tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "r.txt"
    path.write_bytes(text.encode("latin-1"))
    ended = run_bounded(["check", str(path), "--results", str(results)])
    assert_clean_failure(ended, 2, says=says)
    assert "\x1b" not in ended.stderr


def test_an_output_that_is_a_device_is_refused(results: Path, tmp_path: Path) -> None:
    (tmp_path / "r.txt").write_text(STACK)
    ended = run_bounded(["check", str(tmp_path / "r.txt"), "--results", str(results), "--output", "/dev/null"])
    assert_clean_failure(ended, 2, says="--output")
