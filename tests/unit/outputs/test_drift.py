"""The drift comparison (outputs/drift.py): tolerances by dtype, device and measured noise; the first quantity and
step beyond them; what changed; the reference environment; the drift control; bisect's and watch's words."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from envmatrix.outputs import drift
from envmatrix.outputs.findings import find
from envmatrix.outputs.report import render_html
from envmatrix.records.record import Record
from tests.records_factory import make_record

SAMPLES = [[s, p, -5.0 - 0.1 * s - 0.01 * p] for s in range(4) for p in range(3)]


def fingerprint(dtype: str = "fp32", device: str = "cpu", **changes: Any) -> dict[str, Any]:
    fp: dict[str, Any] = {
        "version": "1",
        "dtype": dtype,
        "device": device,
        "attn": "sdpa",
        "family": "qwen2",
        "weights": "reference",
        "weights_digest": "w" * 64,
        "config": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0},
        "logp": {"tokens": 12, "digest": "d" * 64, "max_abs": 5.32, "mean_abs": 5.16, "finite": True, "samples": copy.deepcopy(SAMPLES)},
        "steps": [
            {"step": 0, "loss": 0.0, "nll": 5.16, "grad_norm": 2.0, "grad_norm_groups": {"attention": 1.5, "mlp": 1.0, "head": 0.5}},
            {"step": 1, "loss": -0.07, "nll": 5.15, "grad_norm": 2.1},
            {"step": 2, "loss": -0.17, "nll": 5.14, "grad_norm": 2.3},
        ],
    }
    if dtype != "fp32":
        fp["noise"] = {"logp_vs_fp32": 0.03}
    fp.update(changes)
    return fp


def moved_logp(fp: dict[str, Any], seq: int, pos: int, by: float) -> dict[str, Any]:
    fp = copy.deepcopy(fp)
    fp["logp"]["digest"] = "e" * 64
    for s in fp["logp"]["samples"]:
        if (s[0], s[1]) == (seq, pos):
            s[2] += by
    return fp


def cell(fp: dict[str, Any] | None, *, transformers: str = "4.51.3", scenario: str = "fp32-sdpa", fault: str | None = None, **kw: Any) -> Record:
    r = make_record("ok", scenario=scenario, transformers=transformers, torch="2.13.0", gpu="cpu", cuda="none", **kw)
    result = {**r.result, **({"fingerprint": fp} if fp is not None else {})}
    settings = {"fault": fault} if fault else {}
    return replace(r, result=result, cell=replace(r.cell, scenario_settings=settings))


def test_identical_numbers_agree_with_zero_sizes() -> None:
    rep = drift.report([cell(fingerprint()), cell(fingerprint(), transformers="4.57.6")])
    assert rep.references == ("cpu-torch2.13.0-tf4.51.3-fanone-cpu-py3.11",)
    (c,) = rep.comparisons
    assert not c.drifts and c.worst["logp"] == 0.0 and c.worst["grad_norm"] == 0.0
    assert "numbers agree with cpu-torch2.13.0-tf4.51.3" in c.text


def test_fp32_cpu_is_tight_and_names_the_located_token() -> None:
    ref = cell(fingerprint())
    small = drift.compare(ref, cell(moved_logp(fingerprint(), 1, 2, 5e-5), transformers="4.57.6"))
    assert not small.drifts and small.worst["logp"] == pytest.approx(5e-5)
    big = drift.compare(ref, cell(moved_logp(fingerprint(), 1, 2, 6e-4), transformers="5.23.0"))
    first = big.first
    assert first is not None and (first.quantity, first.step, first.where) == ("logp", 0, "sequence 1, position 2")
    assert first.size == pytest.approx(6e-4) and first.tolerance == 1e-4
    assert "transformers 4.51.3 → 5.23.0" in big.text and "from step 0" in big.text


def test_bf16_tolerance_is_loose_and_widened_by_measured_noise() -> None:
    ref = cell(fingerprint("bf16"), scenario="bf16-sdpa")
    within = drift.compare(ref, cell(moved_logp(fingerprint("bf16"), 0, 0, 0.055), transformers="4.57.6", scenario="bf16-sdpa"))
    assert within.tolerance.logp == pytest.approx(0.06) and "widened" in within.tolerance.why
    assert not within.drifts
    beyond = drift.compare(ref, cell(moved_logp(fingerprint("bf16"), 0, 0, 0.2), transformers="4.57.6", scenario="bf16-sdpa"))
    assert beyond.drifts
    gpu = drift.tolerance(drift.Fingerprint(dtype="bf16", device="cuda"), drift.Fingerprint(dtype="fp32", device="cpu"))
    assert gpu.logp == drift.TOLERANCES[("bf16", "cuda")].logp  # the looser side's


def test_a_curve_that_leaves_later_is_named_at_its_step() -> None:
    later = fingerprint()
    later["steps"][2]["loss"] = -0.3
    c = drift.compare(cell(fingerprint()), cell(later, transformers="4.57.6"))
    assert c.first is not None and (c.first.quantity, c.first.step) == ("loss", 2)
    assert "from step 2" in drift.brief(c)


def test_a_group_gradient_norm_and_a_changed_default_are_named() -> None:
    other = fingerprint(config={"rms_norm_eps": 1e-5, "rope_theta": 10000.0})
    other["steps"][0]["grad_norm_groups"]["mlp"] = 1.01
    c = drift.compare(cell(fingerprint()), cell(other, transformers="4.57.6"))
    assert c.first is not None and c.first.quantity == "grad_norm[mlp]" and c.first.size == pytest.approx(0.01)
    assert any("config rms_norm_eps 1e-06 → 1e-05" in x for x in c.changed)
    assert "gradient norm of the mlp parameters 1e-02 relative" in drift.brief(c)


def test_other_weights_are_said_before_any_number() -> None:
    c = drift.compare(cell(fingerprint()), cell(fingerprint(weights_digest="x" * 64), transformers="4.57.6"))
    assert c.first is not None and c.first.quantity == "weights"
    assert "weights" in drift.brief(c) and "inf" not in drift.brief(c)


def test_the_control_is_found_against_the_reference_envs_healthy_cell() -> None:
    base = cell(fingerprint())
    ctl = cell(moved_logp(fingerprint(), 2, 1, 6e-4), scenario="ctl-drift", fault="drift")
    missed = cell(fingerprint(), scenario="ctl-drift", fault="drift", transformers="4.57.6")
    rep = drift.report([base, ctl, missed, cell(fingerprint(), transformers="4.57.6")])
    assert [c.reference.id for c in rep.controls] == [base.id, base.id]
    assert [c.record.id for c in rep.controls_missed] == [missed.id]
    assert "drift control found in 1/2" in rep.text
    assert rep.drifting == () and len(rep.agreeing) == 1


def test_controls_of_other_detectors_and_cells_without_numbers_are_not_compared() -> None:
    garbled = replace(cell(moved_logp(fingerprint(), 0, 0, 1.0), scenario="ctl-garbled", fault="broken_attention", transformers="4.57.6"))
    expecting = replace(garbled, cell=replace(garbled.cell, expect="garbled_output"))
    failed = cell({"version": "1", "error": "RuntimeError: boom"}, transformers="4.57.6")
    rep = drift.report([cell(fingerprint()), expecting, failed, cell(None, transformers="5.23.0")])
    assert rep.comparisons == ()


def test_reference_is_the_base_environment_or_the_one_chosen() -> None:
    old, new = cell(fingerprint()), cell(moved_logp(fingerprint(), 0, 0, 0.01), transformers="5.23.0")
    assert drift.report([new, old]).references == (old.env,)
    chosen = drift.report([new, old], reference=new.env)
    assert chosen.references == (new.env,) and chosen.comparisons[0].record.id == old.id


def test_a_scenario_absent_from_the_reference_uses_a_cell_of_the_same_model_dtype_and_attention() -> None:
    base = cell(fingerprint())
    trl = cell(fingerprint(), scenario="trl-grpo", transformers="4.57.6")
    bf16 = cell(fingerprint("bf16"), scenario="trl-grpo-bf16", transformers="4.57.6")
    rep = drift.report([base, trl, bf16])
    assert [c.reference.id for c in rep.comparisons] == [base.id]
    assert rep.without == (bf16.id,)


def test_bisect_reads_a_drifting_cell_as_changed() -> None:
    good = cell(fingerprint())
    same = drift.drift_label(good, cell(fingerprint(), transformers="4.57.6"))
    assert same == drift.Seen("ok", "numbers agree with the good release's (largest log-probability difference 0e+00)")
    seen = drift.drift_label(good, cell(moved_logp(fingerprint(), 0, 0, 0.02), transformers="5.23.0"))
    assert seen is not None and seen.label == "drift" and "log-probabilities 2e-02 away" in seen.text
    crashed = replace(cell(fingerprint(), transformers="5.23.0"), outcome=make_record("error").outcome)
    assert drift.drift_label(good, crashed) is None


def test_findings_and_html_carry_the_drift() -> None:
    recs = [cell(fingerprint()), cell(moved_logp(fingerprint(), 0, 0, 0.02), transformers="5.23.0")]
    assert find(recs).findings == ()  # a drift is no outcome finding
    assert len(drift.report(recs).drifting) == 1
    page = render_html(recs)
    assert 'id="drift-line"' in page and "≈ drift" in page and "numbers differ from cpu-torch2.13.0-tf4.51.3" in page


def test_the_same_non_finite_number_agrees_and_a_new_one_drifts() -> None:
    nan = fingerprint()
    nan["steps"][2]["loss"] = "nan"
    assert not drift.compare(cell(nan), cell(copy.deepcopy(nan), transformers="4.57.6")).drifts
    c = drift.compare(cell(fingerprint()), cell(nan, transformers="4.57.6"))
    assert c.first is not None and (c.first.quantity, c.first.step) == ("loss", 2)


def test_damaged_samples_are_left_out_not_fatal() -> None:
    bad = moved_logp(fingerprint(), 0, 0, 0.5)
    bad["logp"]["samples"][0][0] = float("nan")
    bad["logp"]["samples"][1] = [1.5, 0, -5.0]
    c = drift.compare(cell(fingerprint()), cell(bad, transformers="4.57.6"))
    assert c.worst["logp"] == 0.0  # the moved sample (0, 0) was the damaged one
