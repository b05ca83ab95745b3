"""Vetting and economy are one rule (plan/vetrule.py): a control vets the healthy cells on its detector stack,
the planner plans the fewest controls that vet every environment, and `plan` says where none can."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE

from envmatrix.errors import SpecError
from envmatrix.plan import vetrule
from envmatrix.plan.cells import PLANNED, SKIPPED
from envmatrix.plan.eligibility import NOT_APPLICABLE, VETTING
from envmatrix.plan.expand import expand
from envmatrix.spec.matrix import Scenario, load, parse
from envmatrix.spec.yamlsrc import Source

ROOT = Path(__file__).resolve().parents[3]
AXES = {"gpu": "A100", "cuda": "12.4", "torch": "2.5.1", "flash_attn": "2.7.4.post1"}


def test_the_detector_stack_is_the_attention_stack_plus_the_trainer_and_engine_a_scenario_trains_through() -> None:
    builtin = vetrule.stack_of(AXES, {"trl": "1.16.0", "peft": "0.15.2"}, Scenario("a", lora=True))
    assert builtin == vetrule.Stack("A100", "12.4", "2.5.1", "2.7.4.post1")  # peft and an unused trl are not in it
    trl = vetrule.stack_of(AXES, {"trl": "1.16.0"}, Scenario("t", trainer="trl"))
    assert trl.packages == (("accelerate", "none"), ("trl", "1.16.0"))
    zero = vetrule.stack_of(AXES, {"deepspeed": "0.18.4"}, Scenario("z", world_size=2, parallel="zero3"))
    assert zero.packages == (("deepspeed", "0.18.4"),)
    fsdp = vetrule.stack_of(AXES, {}, Scenario("f", world_size=2, parallel="fsdp2"))
    assert fsdp == builtin  # FSDP2 is torch's own: the attention stack's torch
    assert vetrule.stack_of({**AXES, "gpu": "H20"}, {}, Scenario("a")) != builtin
    assert vetrule.stack_of({**AXES, "cuda": "12.1"}, {}, Scenario("a")) != builtin
    assert builtin.text() == "A100 · cu124 torch 2.5.1 · flash-attn 2.7.4.post1 · built-in loop"


def test_a_record_is_read_by_the_same_rule() -> None:
    settings = {"trainer": "trl", "parallel": "zero3", "world_size": 2, "unknown": 1}
    got = vetrule.scenario_from_settings("x", settings)
    assert (got.trainer, got.parallel) == ("trl", "zero3")
    assert vetrule.scenario_from_settings("y", {}).trainer == "builtin"


def doc(**more: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    out["profiles"] = {
        "gpu": {
            "cuda": ["12.4"],
            "torch": ["2.5.1", "2.6.0"],
            "transformers": ["4.49.0", "4.57.6"],
            "flash_attn": ["none"],
            "gpu": ["A100", "H20"],
            "python": ["3.11"],
            "scenarios": ["ctl-zero-grad", "ctl-nan", "bf16-sdpa"],
            **more,
        }
    }
    out["scenarios"] = {
        "bf16-sdpa": {"dtype": "bf16"},
        "ctl-zero-grad": {"temperature": 0.01, "top_p": 0.001, "expect": "zero_grad"},
        "ctl-nan": {"num_generations": 1, "std": "unbiased", "expect": "nan_loss"},
    }
    return out


def plan(d: dict[str, Any]) -> list[Any]:
    return expand(parse(Source(data=d, name="matrix.yaml", lines={})), "gpu")


def test_fewest_plans_one_control_per_stack_and_every_environment_is_vetted() -> None:
    cells = plan(doc(controls="fewest"))
    controls = [c for c in cells if c.scenario.expect and c.status == PLANNED]
    # 2 torch × 2 GPUs = 4 stacks; transformers is not in the stack, so 8 environments need 4 controls
    assert len(controls) == 4 and {c.scenario.name for c in controls} == {"ctl-zero-grad"}
    skipped = [c for c in cells if c.scenario.expect and c.status == SKIPPED]
    assert len(skipped) == 12 and all(c.kinds == (VETTING,) and "not needed to vet:" in c.reason for c in skipped)
    assert VETTING in NOT_APPLICABLE  # by design, not a compatibility fact
    healthy = [c for c in cells if not c.scenario.expect]
    assert all(c.vetted_by and not c.unvetted for c in healthy)
    by_id = {c.id: c for c in cells}
    h = by_id["cu124-torch2.5.1-tf4.57.6-fanone-h20-py3.11/bf16-sdpa"]
    assert h.vetted_by == "cu124-torch2.5.1-tf4.49.0-fanone-h20-py3.11/ctl-zero-grad"  # same stack, other transformers
    assert h.as_dict()["vetted_by"] == h.vetted_by
    rows = vetrule.vetting_by_gpu(cells)
    assert {g: (r["environments"], r["vettable"], r["controls"]) for g, r in rows.items()} == {"A100": (4, 4, 2), "H20": (4, 4, 2)}


def test_all_keeps_every_control_and_still_names_the_one_that_vets() -> None:
    cells = plan(doc())
    assert sum(c.scenario.expect is not None and c.status == PLANNED for c in cells) == 16
    assert all(c.vetted_by for c in cells if not c.scenario.expect)


def test_an_exclude_rule_that_removes_a_stacks_controls_is_reported_not_silent() -> None:
    rule = {"gpu": "H20", "scenario": "ctl-*", "reason": "A100 runs the controls"}
    cells = plan(doc(controls="fewest", exclude=[rule]))
    h20 = [c for c in cells if c.env.gpu == "H20" and not c.scenario.expect]
    assert h20 and all(not c.vetted_by for c in h20)
    assert all("no control runs on its detector stack (H20 · cu124" in c.unvetted and "excluded by" in c.unvetted for c in h20)
    rows = vetrule.vetting_by_gpu(cells)
    assert (rows["H20"]["vettable"], len(rows["H20"]["unvettable"])) == (0, 4)
    assert rows["A100"]["vettable"] == 4 and not rows["A100"]["unvettable"]


def test_a_stack_with_no_control_declared_says_so() -> None:
    cells = plan(doc(scenarios=["bf16-sdpa"]))
    assert all("no control runs on its detector stack" in c.unvetted and "add a control scenario" in c.unvetted for c in cells)


def test_controls_takes_all_or_fewest() -> None:
    with pytest.raises(SpecError, match=r"controls.*choose all"):
        plan(doc(controls="some"))


def test_the_shipped_gpu_profile_vets_every_environment_on_every_gpu_type() -> None:
    cells = expand(load(ROOT / "matrix.yaml"), "gpu")
    rows = vetrule.vetting_by_gpu(cells)
    assert set(rows) == {"A100", "H20", "H100", "H200", "B200"}
    assert all(r["environments"] and r["vettable"] == r["environments"] for r in rows.values()), rows
    ids = {c.id: c for c in cells}
    # the seeds' stacks are planned on H20 and A100, each vetted on its own GPU type
    for gpu in ("h20", "a100"):
        for env in (
            f"cu121-torch2.5.1-tf4.49.0-fa2.7.4.post1-{gpu}-py3.11",  # cuBLAS 12.1.3.1: the H20 SIGFPE
            f"cu124-torch2.6.0-tf4.49.0-fa2.7.4.post1-{gpu}-py3.11",  # flash-attn wheel, old C++ ABI
            f"cu126-torch2.6.0-tf4.49.0-fa2.7.4.post1-{gpu}-py3.11",  # flash-attn wheel, CXX11 ABI
        ):
            for scenario in ("kernels-7b", "bf16-fa2", "bf16-vlm-lora-ddp2-reentrant"):
                cell = ids[f"{env}/{scenario}"]
                assert cell.status == PLANNED and cell.vetted_by.split("/")[0].endswith(f"-{gpu}-py3.11"), cell
        for tf in ("4.42.3", "4.49.0"):  # Gemma-2 through flash-attn before and after transformers' softcap fix
            assert ids[f"cu124-torch2.5.1-tf{tf}-fa2.7.4.post1-{gpu}-py3.11/bf16-gemma2-fa2"].status == PLANNED
