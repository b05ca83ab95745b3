"""The garbled-text measure: the shapes broken attention produces, text that must pass, and the thresholds on real logs."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from envmatrix.records.probe_result import ProbeResult
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.garble import garbled
from envmatrix.verdict.logscan import scan_text

REAL_LOGS = Path(__file__).resolve().parents[2] / "data" / "real-logs"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("The answer is " + "the " * 40, "repeated"),
        ("<|endoftext|>" * 30, "repeated"),
        ("Result: " + "1" * 40, "one character"),
        ("So " + "7 " * 30 + "done", "repeated"),
        ("Solve: " + "the cat sat on the mat and " * 8, "3-grams"),
        ("Hello world привет мир 你好世界 こんにちは สวัสดี ครับ " * 3 + "Ответ 答案 คำตอบ answer", "scripts"),
        ("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "one character"),
        (", ".join(["151644"] * 20), "repeated"),
        ("pred: " + "ab cd " * 20, "3-grams"),
        # token salad: words drawn from a multilingual vocabulary, glued without spaces
        ("Generated text: 'mountainเรือnorth 川口riverbed stoneщель over the hill'", "glued inside words"),
    ],
)
def test_garbled_shapes(text: str, why: str) -> None:
    judged = garbled(text)
    assert judged is not None and why in judged.reason, judged


@pytest.mark.parametrize(
    "text",
    [
        "The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill nearby.",
        '  File "/usr/lib/python3.11/site-packages/transformers/trainer.py", line 1536, in train return inner_training_loop(',
        "{'loss': 0.0, 'grad_norm': 0.95, 'learning_rate': 1e-06, 'reward': 0.9, 'reward_std': 0.83, 'kl': 0.0001, 'epoch': 0.1}",
        "训练日志：模型在第三步的损失为零，但是梯度范数大于零，所以训练是健康的。Loss is zero but grad norm is positive.",
        "input_ids: [151644, 8948, 198, 2610, 525, 264, 10950, 17847, 13, 151645, 198, 151644, 872, 198, 3838, 374, 220, 17]",
        "short",
        "x = 0x0000000000000000 at address 0x7ffd, memory ok, registers saved",
        # scripts that real writing joins inside a word: Latin in Chinese, Japanese and Korean text
        "先用pip安装vllm，然后在GPU上运行，再用모델을 测试 一下，最后 checkをする。",
        "Hello world, 你好世界 and Привет мир in three scripts, each word whole",
    ],
)
def test_text_that_reads_as_text(text: str) -> None:
    assert garbled(text) is None


def test_thresholds_hold_on_real_logs() -> None:
    """No line of a non-garbled real excerpt is judged garbled; every garbled excerpt is (the data the thresholds come from)."""
    with (REAL_LOGS / "INDEX.tsv").open() as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    for row in rows:
        text = (REAL_LOGS / row["file"]).read_bytes().decode("utf-8", "replace")
        if row["expected_class"] == "garbled_output":
            assert garbled(text) is not None, row["file"]
        else:
            assert [line for line in text.splitlines() if garbled(line)] == [], row["file"]


def test_generated_text_in_a_user_log_is_judged_by_the_measure() -> None:
    for completion in ("'completion': '" + "Paris " * 30 + "'", "sample 3: " + "<|endoftext|>" * 20, "generated: " + "42 " * 30):
        v = classify(RunFacts(scan=scan_text("step 1\n" + completion + "\n{'loss': 0.1, 'grad_norm': 0.4}\n")))
        assert v.outcome == "garbled_output" and "line 2:" in v.evidence, v


def test_probe_samples_are_judged_by_the_same_measure() -> None:
    result = {"finished": True, "steps_completed": 4, "samples": ["'The capital of France is Paris.'", repr("ok " * 40)]}
    v = classify(RunFacts(probe=ProbeResult.parse(result), metrics=({"step": 1, "grad_norm": 0.5},), exit_code=0))
    assert v.outcome == "garbled_output" and v.evidence.startswith("probe sample 1: token 'ok'")
    healthy = {**result, "samples": ["'The capital of France is Paris.'", "'Two plus two is four, so the answer is 4.'"]}
    assert classify(RunFacts(probe=ProbeResult.parse(healthy), metrics=({"step": 1, "grad_norm": 0.5},), exit_code=0)).outcome == "ok"


def test_a_healthy_id_list_does_not_hide_the_garbled_text_after_it() -> None:
    ids = "prompt ids: [" + ", ".join(str(151000 + i) for i in range(40)) + "]\n"
    log = ids + "INFO step 1\n" + "completion: " + "the " * 40 + "\n{'loss': 0.1, 'grad_norm': 0.4}\n"
    v = classify(RunFacts(scan=scan_text(log)))
    assert v.outcome == "garbled_output" and v.evidence.startswith("line 3:"), v
