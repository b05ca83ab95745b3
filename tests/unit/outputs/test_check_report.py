"""check's SARIF is valid SARIF 2.1.0 (OASIS's schema, tests/data/sarif) and points at the line that pins the release."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cpu_records import cpu_records, cpu_results

from envmatrix.answers.check import answer
from envmatrix.cli import main
from envmatrix.outputs.check_report import location, sarif, text
from envmatrix.stack import read_stack

SCHEMA = Path(__file__).resolve().parents[2] / "data" / "sarif" / "sarif-schema-2.1.0.json"
STACKS = {
    "bad": "# ours\ntorch==2.13.0+cpu\ntransformers==4.57.6\ndeepspeed==0.15.4\n",
    "vetted": "torch==2.13.0+cpu\ntransformers==5.23.0\ntrl==1.16.0\n",
    "never": "torch==2.13.0+cpu\ntransformers==5.19.0\ntrl==1.16.0\n",
    "declared": "torch==2.13.0+cpu\ntransformers==4.57.6\naccelerate==1.2.1\ntrl==0.19.1\n",
}


def validate(doc: dict[str, Any]) -> None:
    jsonschema.Draft4Validator(json.loads(SCHEMA.read_text())).validate(doc)


@pytest.mark.parametrize("name", sorted(STACKS))
def test_every_answer_is_valid_sarif(tmp_path: Path, name: str) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(STACKS[name])
    validate(sarif(answer(read_stack(path), cpu_records(), "cpu", {}, "3.11"), root=tmp_path))


def test_the_schema_refuses_what_is_not_sarif() -> None:
    with pytest.raises(jsonschema.ValidationError):
        validate({"version": "2.1.0", "runs": [{"tool": {"driver": {}}}]})  # a driver needs a name


def test_a_known_bad_result_points_at_the_pinning_line(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(STACKS["bad"])
    doc = sarif(answer(read_stack(path), cpu_records(), "cpu", {}, "3.11"), root=tmp_path)
    [result] = [r for r in doc["runs"][0]["results"] if r["ruleId"] == "known-bad"]
    assert result["level"] == "error"
    assert result["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "requirements.txt"}, "region": {"startLine": 4}}
    assert "zero3 (cpu): engine_error on deepspeed 0.15.4" in result["message"]["text"]


def test_a_location_needs_a_line_and_is_a_uri_reference() -> None:
    assert location("/usr/bin/python3") is None
    assert location("my reqs#1.txt:3", Path.cwd()) == {"physicalLocation": {"artifactLocation": {"uri": "my%20reqs%231.txt"}, "region": {"startLine": 3}}}
    assert location("a/b.txt:7 (a constraint)", Path.cwd()) == {"physicalLocation": {"artifactLocation": {"uri": "a/b.txt"}, "region": {"startLine": 7}}}


def test_the_cli_writes_sarif_to_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("requirements.txt").write_text(STACKS["bad"])
    results = cpu_results(tmp_path / "results")
    assert main(["check", "requirements.txt", "--results", str(results), "--format", "sarif", "--output", "check.sarif"]) == 1
    doc = json.loads(Path("check.sarif").read_text())
    validate(doc)
    assert doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "requirements.txt"


def test_text_escapes_what_records_say(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(STACKS["bad"])
    a = answer(read_stack(path), cpu_records(), "cpu", {}, "3.11")
    a.notes.append("\x1b[31mred")
    assert "\x1b" not in text(a)


def test_an_output_that_is_a_folder_is_refused_before_anything_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out").mkdir()
    assert main(["check", str(tmp_path / "missing.txt"), "--results", str(tmp_path), "--output", str(tmp_path / "out")]) == 2
    assert "--output" in capsys.readouterr().err
