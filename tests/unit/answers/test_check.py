"""check answers a stack from the cpu profile's real records and the fact tables: known bad (with the line that pins
it), vetted, declared incompatible, never run (and what is nearest)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cpu_records import cpu_records, cpu_results

from envmatrix.answers.check import Answer, answer
from envmatrix.cli import main
from envmatrix.records.provenance import Provenance
from envmatrix.stack import read_stack


def check(tmp_path: Path, text: str, name: str = "requirements.txt") -> Answer:
    path = tmp_path / name
    path.write_text(text)
    return answer(read_stack(path), cpu_records(), "cpu", {}, "3.11")


def test_a_pin_a_finding_covers_is_known_bad_at_its_line(tmp_path: Path) -> None:
    a = check(tmp_path, "# zero-3\ntorch==2.13.0+cpu\ntransformers==4.57.6\ndeepspeed==0.15.4\n")
    assert a.exit_code() == 1
    [bad] = a.known_bad
    assert (bad.scenario, bad.outcome, bad.axes) == ("zero3", "engine_error", ("deepspeed",))
    assert bad.where == (f"{tmp_path / 'requirements.txt'}:4",)
    assert bad.fixed_in == "deepspeed 0.18.4" and not bad.first_bad
    assert "numactl" in bad.evidence and bad.signer.startswith("not signed")


def test_a_vetted_stack_exits_0_and_says_what_it_is_vetted_for(tmp_path: Path) -> None:
    a = check(tmp_path, "torch==2.13.0+cpu\ntransformers==5.23.0\ntrl==1.16.0\n")
    assert a.exit_code() == 0 and not a.known_bad and not a.declared
    [v] = a.vetted
    assert v.env == "cpu-torch2.13.0-tf5.23.0-fanone-trl1.16.0-cpu-py3.11" and v.vetted
    assert set(v.scenarios) == {"trl-grpo", "trl-lora-ckpt"} and v.controls == "3/3"
    assert not a.nearest


def test_a_stack_never_run_names_the_nearest_that_ran(tmp_path: Path) -> None:
    a = check(tmp_path, "torch==2.13.0+cpu\ntransformers==5.19.0\ntrl==1.16.0\n")
    assert a.exit_code() == 0 and a.never_run and not a.vetted
    assert a.nearest[0].env == "cpu-torch2.13.0-tf5.23.0-fanone-trl1.16.0-cpu-py3.11"
    assert a.nearest[0].differs == ("transformers 5.23.0 (yours: 5.19.0)",)


def test_an_older_release_between_bad_ones_is_not_called_bad_without_a_run(tmp_path: Path) -> None:
    # frozen-emb-reentrant is grad_lost on transformers 4.51.3 and 4.57.6: 4.55.0 never ran, so nothing is claimed of it
    a = check(tmp_path, "torch==2.13.0+cpu\ntransformers==4.55.0\n")
    assert not a.known_bad and a.never_run


def test_a_range_that_admits_a_bad_release_is_known_bad_through_the_range(tmp_path: Path) -> None:
    a = check(tmp_path, "torch==2.13.0+cpu\ntransformers==4.57.6\ndeepspeed<0.16\n")
    [bad] = [k for k in a.known_bad if k.scenario == "zero3"]
    assert bad.admits and bad.where == (f"{tmp_path / 'requirements.txt'}:3",)


def test_a_release_whose_own_metadata_says_no_is_declared_incompatible(tmp_path: Path) -> None:
    a = check(tmp_path, "torch==2.13.0+cpu\ntransformers==4.57.6\naccelerate==1.2.1\ntrl==0.19.1\n")
    assert a.exit_code() == 1
    [d] = a.declared
    assert d.where.endswith(":4") and "accelerate>=1.4.0" in d.reason and d.source == "metadata"


def test_the_catalog_rules_out_a_transformers_above_its_torch_floor(tmp_path: Path) -> None:
    a = check(tmp_path, "torch==2.0.1+cpu\ntransformers==5.23.0\n")
    assert any(d.source == "catalog" and "transformers" in d.reason and d.where.endswith(":2") for d in a.declared)


def test_a_lock_is_read_as_init_reads_it(tmp_path: Path) -> None:
    lock = (
        'lock-version = "1.0"\nrequires-python = "==3.11.*"\n\n[[packages]]\nname = "torch"\nversion = "2.13.0+cpu"\n\n'
        '[[packages]]\nname = "transformers"\nversion = "4.57.6"\n\n[[packages]]\nname = "deepspeed"\nversion = "0.15.4"\n'
    )
    a = check(tmp_path, lock, "pylock.toml")
    [bad] = a.known_bad
    assert bad.where == (f"{tmp_path / 'pylock.toml'}:12",)


def test_who_signed_a_finding_is_said(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("torch==2.13.0+cpu\ntransformers==4.57.6\ndeepspeed==0.15.4\n")
    cell = "cpu-torch2.13.0-tf4.57.6-fanone-deepspeed0.15.4-cpu-py3.11/zero3"
    prov = {cell: Provenance("https://x/", verified=True, signer="ab" * 32)}
    [bad] = answer(read_stack(path), cpu_records(), "cpu", prov, "3.11").known_bad
    assert bad.signer == f"verified: signed by {'ab' * 8}, a key you trust"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("torch==2.13.0+cpu\ntransformers==4.57.6\ndeepspeed==0.15.4\n", 1),
        ("torch==2.13.0+cpu\ntransformers==5.23.0\ntrl==1.16.0\n", 0),
        ("torch==2.13.0+cpu\ntransformers==5.19.0\n", 0),
        ("torch==2.13.0+cpu\ntransformers = = 5\n", 2),
    ],
)
def test_the_exit_status(tmp_path: Path, text: str, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    results = cpu_results(tmp_path / "results")
    (tmp_path / "r.txt").write_text(text)
    assert main(["check", str(tmp_path / "r.txt"), "--results", str(results)]) == code


def test_no_records_is_exit_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "r.txt").write_text("torch==2.13.0+cpu\n")
    assert main(["check", str(tmp_path / "r.txt"), "--results", str(tmp_path / "empty")]) == 3
    assert "no records" in capsys.readouterr().err
    results = cpu_results(tmp_path / "results")
    assert main(["check", str(tmp_path / "r.txt"), "--results", str(results), "--gpu", "H20"]) == 3


def test_a_package_the_stack_pins_and_a_cell_lacks_is_not_that_cell(tmp_path: Path) -> None:
    a = check(tmp_path, "torch==2.13.0+cpu\ntransformers==5.23.0\ntrl==1.16.0\ndeepspeed==0.18.4\npeft==0.15.2\n")
    assert {v.env for v in a.vetted} == {"cpu-torch2.13.0-tf5.23.0-fanone-deepspeed0.18.4-trl1.16.0-cpu-py3.11"}
    assert any(n.endswith("peft 0.15.2 is no axis of the records on cpu: not compared (its releases were never varied)") for n in a.notes)


def test_a_dependency_the_cell_did_not_pin_is_compared_with_what_its_freeze_installed(tmp_path: Path) -> None:
    # accelerate is `none` on the axis of cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11, but peft brought 1.15.0 there
    a = check(tmp_path, "torch==2.13.0+cpu\ntransformers==4.57.6\naccelerate==1.15.0\n")
    assert "cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11" in {v.env for v in a.vetted if v.vetted}
    assert {k.scenario for k in a.known_bad} >= {"frozen-emb-reentrant"} and a.exit_code() == 1
    other = check(tmp_path, "torch==2.13.0+cpu\ntransformers==4.57.6\naccelerate==1.3.0\n")
    assert "cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11" not in {v.env for v in other.vetted}
