"""One set of scenario fields: every option Scenario.probe_args() passes exists in the probe's parser with
the same default and, where the spec restricts the values, the same choices."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields

import pytest

from envmatrix.spec.matrix import CHOICES, Scenario
from probes.grpo_smoke import build_parser

PARSER = build_parser()
ACTIONS = {a.dest: a for a in PARSER._actions}
PASSED = [f for f in fields(Scenario) if f.name not in ("name", "description", "expect", "world_size")]


def test_probe_args_names_only_fields_the_probe_knows() -> None:
    flags = [a for a in Scenario(name="x").probe_args() if a.startswith("--")]
    known = {s for a in PARSER._actions for s in a.option_strings}
    assert [f for f in flags if f not in known] == []
    assert len(flags) == len(PASSED)


@pytest.mark.parametrize("f", PASSED, ids=lambda f: f.name)
def test_same_default(f) -> None:  # type: ignore[no-untyped-def]
    assert f.name in ACTIONS, f"the probe has no --{f.name.replace('_', '-')}"
    assert f.default is not MISSING
    assert ACTIONS[f.name].default == f.default, f"{f.name}: spec {f.default!r} vs probe {ACTIONS[f.name].default!r}"


@pytest.mark.parametrize("name", [n for n in CHOICES if n in {f.name for f in PASSED}])
def test_same_choices(name: str) -> None:
    probe_choices = ACTIONS[name].choices
    if probe_choices is None:  # open in the probe (e.g. attention names a registry may add): every spec choice must parse
        for choice in CHOICES[name]:
            assert getattr(PARSER.parse_args(["--out", "x", f"--{name.replace('_', '-')}", choice]), name) == choice
    else:
        assert tuple(probe_choices) == CHOICES[name]


def test_booleans_are_both_ways() -> None:
    for f in PASSED:
        if isinstance(f.default, bool):
            assert isinstance(ACTIONS[f.name], argparse.BooleanOptionalAction), f.name


def test_a_scenario_round_trips_through_the_parser() -> None:
    scenario = Scenario(name="x", dtype="bf16", lora=True, input_grad_hook=False, std="biased", top_k=5, beta=0.1)
    parsed = vars(PARSER.parse_args(["--out", "x", *scenario.probe_args()]))
    for f in PASSED:
        assert parsed[f.name] == getattr(scenario, f.name), f.name


def test_model_families_agree_with_envmatrix_facts() -> None:
    pytest.importorskip("torch")
    from envmatrix.facts import families as facts
    from probes import families

    assert set(families.FAMILIES) == set(facts.FAMILIES) == set(CHOICES["model"])
    for name, family in families.FAMILIES.items():
        assert (family.model_class, family.min_transformers) == (facts.FAMILIES[name].model_class, facts.FAMILIES[name].min_transformers), name


def test_missing_reason_names_the_release() -> None:
    from envmatrix.facts.families import missing_reason

    assert missing_reason("gemma2", "4.41.2") == "model family gemma2 needs transformers >= 4.42.0 (Gemma2ForCausalLM); this environment has 4.41.2"
    assert missing_reason("gemma2", "4.42.0") is None and missing_reason("qwen2_5_vl", "5.23.0") is None


def test_the_engines_are_the_spec_choices() -> None:
    pytest.importorskip("torch")
    from probes import engines

    assert engines.PARALLEL == CHOICES["parallel"] == tuple(ACTIONS["parallel"].choices)
