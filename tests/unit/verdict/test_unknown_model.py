"""An architecture the installed transformers does not know is its own class, in every wording users see."""

from __future__ import annotations

import pytest

from envmatrix.records.outcomes import Outcome
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text

WORDINGS = [
    # transformers' AutoConfig (4.x and 5.x), as users paste it from a too-old environment
    "ValueError: The checkpoint you are trying to load has model type `qwen3` but Transformers does not recognize this architecture. "
    "This could be because of an issue with the checkpoint, or because your version of Transformers is out of date.",
    "ValueError: Unrecognized model in ./my-model. Should have a `model_type` key in its config.json, or contain one of the following strings in its name",
    # the probe's own refusal (preflight)
    "grpo_smoke.py: error: model_type 'qwen3_vl' (/m/config.json) is not known to transformers 4.51.3: a newer transformers release may know it",
]


@pytest.mark.parametrize("line", WORDINGS)
def test_unknown_architectures_are_named_with_their_remedy(line: str) -> None:
    verdict = classify(RunFacts(scan=scan_text(f"Traceback (most recent call last):\n{line}\n"), exit_code=1))
    assert verdict.outcome == Outcome.UNKNOWN_MODEL, verdict
    assert "upgrade transformers" in verdict.remedy


def test_a_model_named_in_passing_is_not_a_failure() -> None:
    verdict = classify(RunFacts(scan=scan_text("loading model type qwen3 from ./m\n"), exit_code=1))
    assert verdict.outcome != Outcome.UNKNOWN_MODEL
