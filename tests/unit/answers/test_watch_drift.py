"""A watch says whether each release tried that trains computes the baseline's numbers (docs/drift.md)."""

from __future__ import annotations

import dataclasses

from envmatrix.answers.watch import AxisWatch, Watch
from envmatrix.answers.watch_summary import as_json, markdown
from envmatrix.plan.cells import Cell, Environment
from envmatrix.records.record import Record, cell_info
from envmatrix.spec.matrix import Scenario
from tests.records_factory import make_record
from tests.unit.outputs.test_drift import fingerprint, moved_logp

BASE = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11")


def rec(env: Environment, fp: dict[str, object], klass: str = "ok") -> Record:
    record = make_record(klass, gpu="cpu", cuda="none")
    return dataclasses.replace(record, cell=cell_info(Cell(env, Scenario("fp32-sdpa"))), result={**record.result, "fingerprint": fp})


def test_each_release_tried_is_said_to_drift_or_agree() -> None:
    newer_tf = dataclasses.replace(BASE, transformers="5.23.0")
    newer_torch = dataclasses.replace(BASE, torch="2.15.0")
    w = Watch(profile="stack", gpu="cpu", base=BASE, scenarios=["fp32-sdpa"], baseline={"fp32-sdpa": rec(BASE, fingerprint())})
    w.axes = [
        AxisWatch("transformers", "4.57.6", newest="5.23.0", records={"fp32-sdpa": rec(newer_tf, moved_logp(fingerprint(), 1, 1, 0.02))}),
        AxisWatch("torch", "2.13.0", newest="2.15.0", records={"fp32-sdpa": rec(newer_torch, moved_logp(fingerprint(), 1, 1, 3e-6))}),
    ]
    text = markdown(w, reports="reports")
    assert "## Numbers against your baseline" in text
    assert (
        "- transformers 5.23.0, fp32-sdpa: trains; numbers differ from your baseline from step 0\\: log-probabilities 2e-02 away" in text
    )  # Markdown-escaped (a summary becomes an issue body)
    assert "` envmatrix bisect --axis transformers --good 4.57.6 --bad 5.23.0 --scenario fp32-sdpa --drift `" in text
    assert "- torch 2.15.0, fp32-sdpa: trains; numbers agree with your baseline (largest log-probability difference 3e-06)" in text
    drift = as_json(w, reports="reports")["drift"]
    assert [(d["axis"], d["drifts"]) for d in drift] == [("transformers", True), ("torch", False)]


def test_a_release_that_does_not_train_is_not_compared() -> None:
    newer = dataclasses.replace(BASE, transformers="5.23.0")
    w = Watch(profile="stack", gpu="cpu", base=BASE, scenarios=["fp32-sdpa"], baseline={"fp32-sdpa": rec(BASE, fingerprint())})
    w.axes = [AxisWatch("transformers", "4.57.6", newest="5.23.0", records={"fp32-sdpa": rec(newer, fingerprint(), klass="error")})]
    assert "Numbers against your baseline" not in markdown(w, reports="reports")
