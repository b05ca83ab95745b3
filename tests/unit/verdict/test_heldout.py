"""The classifier on logs it was never tuned on, and the mechanisms that generalise (wordings, tables)."""

from __future__ import annotations

from bench.bench_heldout import HELDOUT, HELDOUT_3, SETS, same, score
from envmatrix.records.outcomes import Outcome
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text

#: Measured on the first held-out set with the classifier as it was before that set existed (commit 342e8e7): 26 of 27
#: (the one miss: a missing module, which had no class then). A floor, not a tuned figure.
FLOOR = 26
#: The second held-out set (issue 32): the classifier before the rebuild (f667aff) scored 27 of its first 52 logs and
#: 33 of the 59 it holds now; after, 47 of 52, then the 5 misses moved to the tuning corpus (each taught a mechanism),
#: and 12 fresh logs gathered after the change replaced them: 59 of 59. `python bench/bench_heldout.py` prints both.
FLOOR_2 = 59
#: The third held-out set (readers who never saw the classifier, 2026-11-27): 50 of its first 59 before any change for it;
#: the misses that taught a mechanism moved to the tuning corpus and fresh logs gathered after the changes took their
#: place (its README says which): 72 of 75. The three misses left are explained there.
FLOOR_3 = 72


def test_the_held_out_score_stays_above_the_floor_measured_before_tuning() -> None:
    right, total, rows = score(SETS[1])
    assert total >= 20
    assert right >= FLOOR, [r for r in rows if r[1] != r[2]]


def test_the_second_held_out_set_keeps_its_score() -> None:
    right, total, rows = score(HELDOUT)
    assert total >= 40
    assert right >= FLOOR_2, [r for r in rows if r[1] != r[2]]


def test_the_third_held_out_set_keeps_its_score() -> None:
    right, total, rows = score(HELDOUT_3)
    assert total >= 60
    assert right >= FLOOR_3, [r for r in rows if r[1] != r[2]]


def test_the_readers_spellings_of_the_users_own_code_match_your_code() -> None:
    for reader in ("user", "user script", "user-script", "user script (Baichuan-13B inference)", "your code"):
        assert same("your code", reader), reader
    assert not same("your code", "transformers") and not same("transformers", "user script")


def verdict(log: str) -> Outcome:
    return classify(RunFacts(scan=scan_text(log), exit_code=1 if "Error" in log else None)).outcome


def test_older_torch_wordings_are_the_same_failure() -> None:
    old = "RuntimeError: element 0 of variables does not require grad and does not have a grad_fn\n"
    new = "RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn\n"
    assert verdict(old) == verdict(new) == Outcome.GRAD_LOST


MARKDOWN = """| Step | Training Loss | reward | reward_std | kl |
|------|---------------|--------|------------|----|
| 1 | 0.000000 | 1.000000 | 0.000000 | 0.000000 |
| 2 | 0.000000 | 1.000000 | 0.000000 | 0.000120 |
| 3 | 0.000000 | 1.000000 | 0.000000 | 0.000410 |
| 4 | 0.000100 | 1.000000 | 0.000000 | 0.000950 |
"""
COLUMNS = """Step\tTraining Loss\treward\treward_std\tgrad_norm
1\t0.010000\t0.25\t0.43\t0.8100
2\t0.020000\t0.50\t0.50\t0.7700
3\t0.015000\t0.75\t0.43\t0.6900
"""


def test_a_notebook_table_with_rewards_that_always_tie_is_zero_grad() -> None:
    verdict_ = classify(RunFacts(scan=scan_text(MARKDOWN)))
    assert verdict_.outcome == Outcome.ZERO_GRAD and "reward_std 0.0 on the first 3 logged steps" in verdict_.evidence
    assert "| 1 | 0.000000" in verdict_.evidence  # the row quoted


def test_a_tab_separated_table_with_gradients_is_ok_and_a_nan_cell_is_nan_loss() -> None:
    assert verdict(COLUMNS) == Outcome.OK
    assert verdict(COLUMNS.replace("0.015000", "nan")) == Outcome.NAN_LOSS
    spaced = COLUMNS.replace("\t", "   ").replace("Training Loss", "Training Loss")
    assert verdict(spaced) == Outcome.OK


def test_a_table_with_varied_rewards_and_no_gradients_stays_inconclusive() -> None:
    assert verdict(MARKDOWN.replace("| 1.000000 | 0.000000 | 0.000000 |", "| 1.000000 | 0.500000 | 0.000000 |", 1)) == Outcome.INCONCLUSIVE
