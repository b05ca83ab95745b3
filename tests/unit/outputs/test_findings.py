"""Findings from fixture records: splits explained by the axis that separates them, controls, changes."""

from __future__ import annotations

from dataclasses import replace

from records_factory import make_record

from envmatrix.outputs.findings import changes, find, sort_values
from envmatrix.records.outcomes import Outcome
from envmatrix.records.record import Record

TF = ("4.51.3", "4.57.6", "5.23.0")


def cpu_matrix(frozen: dict[str, str], *, ctl_outcome: str = "zero_grad") -> list[Record]:
    """The cpu profile's shape: three transformers releases, healthy scenarios, one control."""
    records = []
    for tf in TF:
        records.append(make_record("ok", scenario="fp32-sdpa", transformers=tf, torch="2.13.0", cuda="none", gpu="cpu"))
        records.append(
            make_record(
                frozen[tf],
                scenario="frozen-emb-reentrant",
                transformers=tf,
                torch="2.13.0",
                cuda="none",
                gpu="cpu",
                evidence="embed_tokens.weight: no gradient",
            )
        )
        outcome = ctl_outcome if tf != "5.23.0" else "zero_grad"
        records.append(make_record(outcome, scenario="ctl-zero-grad", expect="zero_grad", transformers=tf, torch="2.13.0", cuda="none", gpu="cpu"))
    return records


def test_a_split_is_explained_by_the_axis_that_separates_it() -> None:
    records = cpu_matrix({"4.51.3": "grad_lost", "4.57.6": "grad_lost", "5.23.0": "ok"})
    result = find(records)
    assert len(result.findings) == 1
    finding = result.findings[0]
    assert finding.axis == "transformers"
    assert finding.text == "frozen-emb-reentrant (cpu): grad_lost on transformers 4.51.3, 4.57.6; ok on 5.23.0"
    assert finding.example.klass == "grad_lost" and finding.example.outcome.evidence == "embed_tokens.weight: no gradient"
    assert finding.example.outcome.remedy
    assert result.controls.text == "3/3 controls reproduced" and not result.controls.failed


def test_controls_are_not_findings_but_a_failed_control_is_listed() -> None:
    records = cpu_matrix({tf: "ok" for tf in TF}, ctl_outcome="ok")
    result = find(records)
    assert result.findings == ()  # a control's outcome differing between environments is not a stack finding
    assert result.controls.text == "1/3 controls reproduced"
    assert [r.cell.transformers for r in result.controls.failed] == ["4.51.3", "4.57.6"]


def test_two_axes_that_only_together_explain_it_are_named_by_their_combinations() -> None:
    records = [
        make_record("ok", torch="2.6.0", transformers="4.51.3"),
        make_record("nan_loss", torch="2.6.0", transformers="4.57.6"),
        make_record("nan_loss", torch="2.7.1", transformers="4.51.3"),
        make_record("ok", torch="2.7.1", transformers="4.57.6"),
    ]
    finding = find(records).findings[0]
    assert finding.axis is None and finding.axes == ("torch", "transformers")
    assert finding.text == ("fp32-sdpa (A100): nan_loss with (torch 2.6.0, transformers 4.57.6); (torch 2.7.1, transformers 4.51.3); ok otherwise")


def test_a_package_axis_and_a_version_range_explain_it_together() -> None:
    """trl 0.19.1 stops importing with transformers 5.x; trl 1.16.0 works with every release tried."""
    records = []
    for trl, tf, outcome in (
        ("0.19.1", "4.51.3", "ok"), ("0.19.1", "4.57.6", "ok"), ("0.19.1", "5.0.0", "ok"), ("0.19.1", "5.1.0", "error"),
        ("0.19.1", "5.23.0", "missing_module"), ("1.16.0", "4.57.6", "ok"), ("1.16.0", "5.23.0", "ok"),
    ):  # fmt: skip
        rec = make_record(outcome, scenario="trl-grpo", transformers=tf, evidence="No module named 'requests'")
        records.append(replace(rec, cell=replace(rec.cell, packages={"trl": trl}, env=rec.cell.env + f"-trl{trl}")))
    finding = find(records).findings[0]
    assert finding.axes == ("transformers", "trl")
    assert finding.text == (
        "trl-grpo (A100): error with transformers 5.1.0 and trl 0.19.1; missing_module with transformers 5.23.0 and trl 0.19.1; ok otherwise"
    )
    merged = [replace(r, outcome=replace(r.outcome, outcome=Outcome.ERROR)) if r.klass != "ok" else r for r in records]
    assert find(merged).findings[0].text == "trl-grpo (A100): error with transformers ≥ 5.1.0 and trl 0.19.1; ok otherwise"


def test_no_axes_explain_contradicting_records() -> None:
    """The same environment with two outcomes (two runners): nothing separates them; counts are said."""
    records = [make_record("ok"), replace(make_record("nan_loss"), runner=replace(make_record("ok").runner, host="other"))]
    records.append(make_record("ok", torch="2.7.1"))
    finding = find(records).findings[0]
    assert finding.axes == () and finding.text == "fp32-sdpa (A100): nan_loss on 1 environment; ok on 2 environments"


def test_gpus_are_separate_groups_and_everywhere_failures_come_last() -> None:
    records = [
        make_record("sigfpe", scenario="bf16", gpu="H20", torch="2.5.1"),
        make_record("ok", scenario="bf16", gpu="H20", torch="2.6.0"),
        make_record("ok", scenario="bf16", gpu="A100", torch="2.5.1"),
        make_record("ok", scenario="bf16", gpu="A100", torch="2.6.0"),
        make_record("oom", scenario="big", gpu="A100"),
        make_record("skipped", scenario="bf16-fa2", gpu="A100"),
    ]
    texts = [f.text for f in find(records).findings]
    assert texts == ["bf16 (H20): sigfpe on torch 2.5.1; ok on 2.6.0", "big (A100): oom in every environment tried (1)"]


def test_three_outcomes_and_version_order() -> None:
    records = [
        make_record("ok", transformers="4.10.0"),
        make_record("grad_lost", transformers="4.9.0"),
        make_record("nan_loss", transformers="4.51.3"),
        make_record("grad_lost", transformers="4.8.0"),
    ]
    assert find(records).findings[0].text == "fp32-sdpa (A100): grad_lost on transformers 4.8.0, 4.9.0; nan_loss on 4.51.3; ok on 4.10.0"
    assert sort_values(["5.23.0", "4.9.0", "none", "4.57.6"]) == ["4.9.0", "4.57.6", "5.23.0", "none"]


def test_changes_since_an_earlier_run() -> None:
    old = [make_record("ok", transformers="4.51.3"), make_record("ok", transformers="4.57.6"), make_record("ok", transformers="9.9.9")]
    new = [make_record("ok", transformers="4.51.3"), make_record("grad_lost", transformers="4.57.6"), make_record("ok", transformers="5.0.0")]
    found = changes(new, old)
    assert [(c.before, c.after) for c in found] == [("ok", "grad_lost")]
    assert find(new, old).changes[0].text.endswith("4.57.6-fanone-a100-py3.11/fp32-sdpa: ok → grad_lost")


def test_a_missing_module_finding_says_where_it_was_installed() -> None:
    ok = make_record("ok", scenario="trl-grpo", freeze=["requests==2.34.2", "huggingface-hub==0.36.2", "transformers==4.57.6"], transformers="4.57.6")
    bad = make_record(
        "missing_module", scenario="trl-grpo", transformers="5.23.0", evidence="line 19: ModuleNotFoundError: No module named 'requests' (imported by trl)",
        freeze=["huggingface-hub==2.4.0", "transformers==5.23.0"],
    )  # fmt: skip
    finding = find([ok, bad]).findings[0]
    assert finding.note.startswith(f"requests 2.34.2 was installed in {ok.env} (ok; there transformers 4.57.6")
    assert "huggingface-hub 0.36.2 (here 2.4.0)" in finding.note
    assert find([ok, make_record("nan_loss", scenario="trl-grpo", transformers="5.23.0")]).findings[0].note == ""


def test_a_package_left_unpinned_is_not_named_where_the_rest_say_it() -> None:
    """accelerate at `none` (not pinned) beside accelerate 1.2.1 and 1.3.0: the missing_module side is named by
    transformers and trl alone; the engine_error side keeps accelerate, the axis that explains it."""
    records = []
    for trl, acc, tf, outcome in (
        ("0.18.2", "1.2.1", "4.51.3", "ok"), ("0.18.2", "1.2.1", "4.57.6", "engine_error"), ("0.18.2", "1.3.0", "4.57.6", "ok"),
        ("0.19.1", "none", "4.57.6", "ok"), ("0.19.1", "none", "5.23.0", "missing_module"), ("1.16.0", "none", "5.23.0", "ok"),
    ):  # fmt: skip
        rec = make_record(outcome, scenario="trl-grpo", transformers=tf, evidence="x")
        records.append(replace(rec, cell=replace(rec.cell, packages={"trl": trl, "accelerate": acc}, env=rec.cell.env + f"-a{acc}-trl{trl}")))
    text = find(records).findings[0].text
    assert "missing_module with transformers 5.23.0 and trl 0.19.1;" in text and "accelerate none" not in text
    assert "engine_error with transformers 4.57.6 and trl 0.18.2 and accelerate 1.2.1;" in text
