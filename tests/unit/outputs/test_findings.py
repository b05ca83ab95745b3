"""Findings from fixture records: splits explained by the axis that separates them, controls, changes."""

from __future__ import annotations

from records_factory import make_record

from envmatrix.outputs.findings import changes, find, sort_values
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


def test_no_single_axis_explains_it() -> None:
    records = [
        make_record("ok", torch="2.6.0", transformers="4.51.3"),
        make_record("nan_loss", torch="2.6.0", transformers="4.57.6"),
        make_record("nan_loss", torch="2.7.1", transformers="4.51.3"),
        make_record("ok", torch="2.7.1", transformers="4.57.6"),
    ]
    finding = find(records).findings[0]
    assert finding.axis is None
    assert finding.text == "fp32-sdpa (A100): nan_loss on 2 environments; ok on 2 environments"


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
