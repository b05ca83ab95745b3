"""The classifier: real logs, one test per rule, deliberate precedence, and noisy-log robustness."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REAL_LOGS as SHARED_LOGS

from envmatrix.facts.enginefailures import FAILURES as ENGINE_FAILURES
from envmatrix.records.outcomes import OUTCOME_NAMES, Outcome
from envmatrix.records.probe_result import ProbeResult
from envmatrix.verdict.classify import RULES, RunFacts, classify, control_status, signal_number
from envmatrix.verdict.logscan import CHUNK, scan_stream, scan_text

#: The real excerpts travel with the tests; ../shared/real-logs (the 28 first ones) is compared when present.
REAL_LOGS = Path(__file__).resolve().parents[2] / "data" / "real-logs"


def log_class(text: str | bytes, exit_code: int | None = None, **kw: Any) -> str:
    return classify(RunFacts(scan=scan_text(text), exit_code=exit_code, **kw)).outcome


def real_cases() -> list[tuple[str, str]]:
    if not (REAL_LOGS / "INDEX.tsv").exists():
        return []
    with (REAL_LOGS / "INDEX.tsv").open() as fh:
        return [(row["file"], row["expected_class"]) for row in csv.DictReader(fh, delimiter="\t")]


@pytest.mark.parametrize(("name", "expected"), real_cases())
def test_real_log(name: str, expected: str) -> None:
    with (REAL_LOGS / name).open("rb") as fh:
        verdict = classify(RunFacts(scan=scan_stream(fh)))
    assert verdict.outcome == expected, verdict
    assert verdict.evidence and verdict.remedy


def test_real_log_index() -> None:
    """Every excerpt is indexed with its source, named after its class, and the 28 shared ones are byte-identical."""
    cases = real_cases()
    assert len(cases) >= 28 + 30
    assert {name for name, _ in cases} == {p.name for p in REAL_LOGS.glob("*.log")}
    with (REAL_LOGS / "INDEX.tsv").open() as fh:
        notes = {row["file"]: row["notes"] for row in csv.DictReader(fh, delimiter="\t")}
    # a file keeps the name it was shared under; a later rule that judges it otherwise says so in its notes
    assert all((name.split("__")[0] == expected or notes[name].startswith("reclassified")) and expected in OUTCOME_NAMES for name, expected in cases)
    with (REAL_LOGS / "INDEX.tsv").open() as fh:
        assert all(row["source"].strip() for row in csv.DictReader(fh, delimiter="\t"))
    if not (SHARED_LOGS / "INDEX.tsv").exists():
        pytest.skip("../shared/real-logs is absent: nothing to compare with")
    for shared in SHARED_LOGS.glob("*.log"):
        assert (REAL_LOGS / shared.name).read_bytes() == shared.read_bytes(), shared.name


def test_every_outcome_but_those_decided_outside_the_rules_has_a_rule() -> None:
    assert {name for name, _ in RULES} | {"ok", "inconclusive", "skipped", "wrong_gpu"} == set(OUTCOME_NAMES)  # wrong_gpu: the GPU guard


# ---- one test per rule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[h:1:0:1] Caught signal 8 (Floating point exception: integer divide by zero)", "sigfpe"),
        ("bash: line 1: 123 Floating point exception (core dumped) python train.py", "sigfpe"),
        ("  exitcode  : -8 (pid: 3831)\n  traceback : Signal 8 (SIGFPE) received by PID 3831", "sigfpe"),
        ("ImportError: /x/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "import_abi"),
        ("ImportError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found (required by x.so)", "import_abi"),
        ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "driver_too_old"),
        ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "unsupported_gpu"),
        ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "unsupported_gpu"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        ("RuntimeError: Expected to mark a variable ready only once. This error is caused by", "ddp_ready_twice"),
        ("Parameter at index 3 with name w has been marked as ready twice.", "ddp_ready_twice"),
        ("RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn", "grad_lost"),
        # checkpointing's warning alone is no failure (issue 41); beside a run that failed in training, or zero gradients, it is
        ("UserWarning: None of the inputs have requires_grad=True. Gradients will be None", "inconclusive"),
        ("UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n{'loss': 0.1, 'grad_norm': 0.4}", "ok"),
        (
            "UserWarning: None of the inputs have requires_grad=True. Gradients will be None\nTraceback (most recent call last):\n"
            '  File "/v/lib/python3.11/site-packages/transformers/trainer.py", line 1809, in _inner_training_loop\n',
            "grad_lost",
        ),
        ("UserWarning: None of the inputs have requires_grad=True. Gradients will be None\n{'grad_norm': 0.0}\n{'grad_norm': 0.0}", "grad_lost"),
        ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-06}", "nan_loss"),
        ("RuntimeError: probability tensor contains either `inf`, `nan` or element < 0", "nan_loss"),
        ("ids [tensor([" + ", ".join(["151644"] * 40) + "])]", "garbled_output"),
        ("{'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0}\n" * 2, "zero_grad"),
        ("{'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0}", "inconclusive"),  # one step proves nothing
        ("[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)", "nccl_error"),
        ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCL.cpp:1, unhandled cuda error", "nccl_error"),
        ("  exitcode  : -11 (pid: 12)\n  traceback : Signal 11 (SIGSEGV) received by PID 12", "crash"),
        ('Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad', "error"),
        ("{'loss': 0.0, 'grad_norm': 0.95, 'reward': 0.9, 'reward_std': 0.83}", "ok"),
    ],
)
def test_log_rule(text: str, expected: str) -> None:
    assert log_class(text) == expected


def test_exit_codes_alone() -> None:
    assert log_class("", exit_code=-8) == "sigfpe"
    assert log_class("", exit_code=136) == "sigfpe"
    assert log_class("", exit_code=-9) == "crash"
    assert log_class("", exit_code=137) == "crash"
    assert log_class("", exit_code=1) == "error"
    assert log_class("", exit_code=0) == "inconclusive"  # a clean exit is no evidence of training
    assert log_class("") == "inconclusive"
    assert signal_number(-15) == 15 and signal_number(139) == 11 and signal_number(2) is None and signal_number(None) is None


def test_timeout_and_build_flags() -> None:
    assert log_class("step 3", exit_code=-9, timed_out=True) == "timeout"
    assert log_class("", build_failed="step 4/9 pip install flash-attn failed") == "build_failed"


# ---- measured checks from the probe's result -------------------------------------------------------


def result(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "finished": True,
        "steps_completed": 4,
        "first_nonfinite_step": None,
        "parity": {"implementation": "sdpa", "dtype": "bf16", "rel_err": 0.004, "baseline_rel_err": 0.004, "tolerance": 0.008, "within_tolerance": True},
        "params": {"trainable": 27, "with_grad": 27, "without_grad": [], "changed": 27, "all_got_grad": True, "all_changed": True},
    }
    base.update(kw)
    return base


HEALTHY = ({"step": 1, "loss": 0.0, "grad_norm": 0.8, "reward_std": 0.1, "frac_reward_zero_std": 0.0},)


def test_probe_healthy_is_ok_even_with_zero_loss() -> None:
    v = classify(RunFacts(probe=ProbeResult.parse(result()), metrics=HEALTHY, exit_code=0))
    assert v.outcome == "ok" and "27/27 trainable parameters changed" in v.evidence


def test_probe_parity_failure_is_garbled() -> None:
    parity = {"implementation": "envmatrix_broken", "dtype": "fp32", "rel_err": 0.68, "baseline_rel_err": 0.0, "tolerance": 1e-5, "within_tolerance": False}
    v = classify(RunFacts(probe=ProbeResult.parse(result(parity=parity)), metrics=HEALTHY, exit_code=0))
    assert v.outcome == "garbled_output" and "rel err 0.68" in v.evidence


def test_probe_silent_grad_loss() -> None:
    params = {"trainable": 26, "with_grad": 2, "without_grad": ["model.layers.0.mlp.up_proj.weight"], "changed": 2}
    v = classify(RunFacts(probe=ProbeResult.parse(result(params=params)), metrics=HEALTHY, exit_code=0))
    assert v.outcome == "grad_lost" and "24 of 26" in v.evidence


def test_probe_zero_grad_over_first_steps_only() -> None:
    zero = tuple({"step": i, "grad_norm": 0.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0} for i in (1, 2, 3))
    params = {"trainable": 27, "with_grad": 0, "without_grad": ["a"], "changed": 0}
    assert classify(RunFacts(probe=ProbeResult.parse(result(params=params)), metrics=zero, exit_code=0)).outcome == "zero_grad"
    saturating = (*HEALTHY, {"step": 2, "grad_norm": 0.5}, {"step": 3, "grad_norm": 0.4}, {"step": 4, "grad_norm": 0.0})
    assert classify(RunFacts(probe=ProbeResult.parse(result()), metrics=saturating, exit_code=0)).outcome == "ok"


def test_probe_unfinished_without_signature_is_error() -> None:
    v = classify(
        RunFacts(probe=ProbeResult.parse(result(finished=False, stage="build", error={"type": "ValueError", "message": "x", "stage": "build"})), exit_code=1)
    )
    assert v.outcome == "error" and "ValueError" in v.evidence


# ---- precedence --------------------------------------------------------------------------------


def test_sigfpe_beats_the_nccl_timeout_it_causes() -> None:
    text = (
        "[rank1]: [h:1:0:1] Caught signal 8 (Floating point exception: integer divide by zero)\n"
        "[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)\n"
    )
    v = classify(RunFacts(scan=scan_text(text), exit_code=1))
    assert v.outcome == "sigfpe" and "nccl_error" in v.also


def test_nan_beats_the_generate_crash_it_causes() -> None:
    text = "{'loss': nan, 'grad_norm': nan}\nTraceback (most recent call last):\nRuntimeError: probability tensor contains either `inf`, `nan` or element < 0\n"
    v = classify(RunFacts(scan=scan_text(text), exit_code=1))
    assert v.outcome == "nan_loss" and "'loss': nan" in v.evidence


def test_zero_loss_with_gradient_is_healthy() -> None:
    assert log_class("{'loss': 0.0, 'grad_norm': 0.12, 'reward_std': 0.3}\n{'loss': 0.0, 'grad_norm': 0.1}") == "ok"


def test_garbled_beats_the_zero_grad_it_causes() -> None:
    text = "completion ids: " + ", ".join(["33"] * 30) + "\n{'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0}\n" * 2
    v = classify(RunFacts(scan=scan_text(text)))
    assert v.outcome == "garbled_output" and "zero_grad" in v.also


def test_specific_crash_beats_timeout() -> None:
    text = "RuntimeError: Expected to mark a variable ready only once.\n"
    assert classify(RunFacts(scan=scan_text(text), timed_out=True, exit_code=-9)).outcome == "ddp_ready_twice"


def test_sigterm_of_siblings_is_not_a_crash() -> None:
    text = "  exitcode  : -15 (pid: 3830)  (SIGTERM)\n  traceback : Signal 15 (SIGTERM) received by PID 3830\n"
    assert log_class(text, exit_code=1) == "error"


def test_controls() -> None:
    assert control_status("zero_grad", "zero_grad") == "reproduced"
    assert control_status("zero_grad", "ok") == "not reproduced"
    assert control_status(None, "ok") is None


# ---- robustness --------------------------------------------------------------------------------


def test_ansi_colour_codes() -> None:
    text = "\x1b[31mRuntimeError\x1b[0m: \x1b[1mCUDA out of memory.\x1b[0m Tried to allocate"
    v = classify(RunFacts(scan=scan_text(text)))
    assert v.outcome == "oom" and "\x1b" not in v.evidence


def test_carriage_return_progress_bars() -> None:
    text = "  0%|   | 0/10\r 10%|#  | 1/10\r 20%|## | 2/10 {'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0}\r 30%|###| 3/10 {'grad_norm': 0.0}\n"
    v = classify(RunFacts(scan=scan_text(text)))
    assert v.outcome == "zero_grad" and "(line 1: 20%" in v.evidence


def test_rank_prefixes_and_interleaving() -> None:
    text = (
        "[rank0]: step 1\n[rank1]: Traceback (most recent call last):\n[rank0]: step 2\n"
        '[rank1]:   File "t.py", line 3, in <module>\n[rank0]: step 3\n'
        "[rank1]: RuntimeError: Expected to mark a variable ready only once. This error is caused by one of\n"
    )
    v = classify(RunFacts(scan=scan_text(text)))
    assert v.outcome == "ddp_ready_twice" and v.evidence.startswith("line 6: [rank1]:")


def test_truncated_traceback() -> None:
    text = 'Traceback (most recent call last):\n  File "/x/trainer.py", line 1536, in train\n    return inner_training_loop(\n  File "/x/tra'
    assert log_class(text) == "error"


def test_terminal_wrapped_phrase() -> None:
    assert log_class("[rank0]: RuntimeError: Expected to mark a variable\nready only once. This") == "ddp_ready_twice"


def test_torchrun_and_shell_exit_forms() -> None:
    assert log_class("E1122 api.py:1002] failed (exitcode: -8) local_rank: 1 (pid: 3831) of binary: python") == "sigfpe"
    assert log_class("train.sh: line 3: 4242 Killed python train.py", exit_code=137) == "crash"


def test_non_utf8_bytes() -> None:
    data = b"\xff\xfe garbage \x80\x81\n" + "訓練ログ\n".encode("gb18030") + b"RuntimeError: CUDA out of memory. \xe9\n"
    v = classify(RunFacts(scan=scan_text(data)))
    assert v.outcome == "oom" and "\ufffd" in v.evidence


def test_command_echo_is_not_a_signal() -> None:
    log = "$ python probes/grpo_smoke.py --fault sigfpe\n[rank0] injecting (fault sigfpe)\n{'loss': 0.0, 'grad_norm': 0.3}\n"
    assert log_class(log, exit_code=0) == "ok"


def test_signature_across_chunk_boundary() -> None:
    filler = ("x" * 99 + "\n") * (CHUNK // 100)
    data = (filler[: CHUNK - 20] + "\nRuntimeError: element 0 of tensors does not require grad\n").encode()
    scan = scan_stream(io.BytesIO(data))
    assert scan.first("grad_lost") is not None
    assert scan.first("grad_lost").line_no == data[: data.index(b"RuntimeError")].count(b"\n") + 1  # type: ignore[union-attr]


def test_giant_line_without_newline() -> None:
    data = b"a" * (3 * CHUNK) + b" CUDA out of memory " + b"b" * CHUNK
    assert classify(RunFacts(scan=scan_stream(io.BytesIO(data)))).outcome == "oom"


# ---- the command --------------------------------------------------------------------------------


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "envmatrix", *args], input=stdin, capture_output=True, timeout=60)


def test_classify_command_json_and_stdin(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("{'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0}\n" * 2)
    out = run_cli("classify", str(log), "--json")
    assert out.returncode == 0
    data = json.loads(out.stdout)
    assert data["class"] == "zero_grad" and "(line 1:" in data["evidence"] and "temperature" in data["remedy"]
    piped = run_cli("classify", "-", "--exit-code", "-8", stdin=b"anything\n")
    assert piped.returncode == 0 and b"class:    sigfpe" in piped.stdout


def test_classify_command_unreadable(tmp_path: Path) -> None:
    out = run_cli("classify", str(tmp_path / "nope.log"))
    assert out.returncode == 2 and b"cannot read the log" in out.stderr
    out = run_cli("classify", str(tmp_path))
    assert out.returncode == 2


def _noisy_variants(data: bytes) -> dict[str, bytes]:
    """The same failure under other noise: colours, rank prefixes, CRLF, progress bars, bad bytes, a long prefix."""
    lines = data.splitlines()
    bar = b"\r 37%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | 37/100 [00:12<00:21,  2.95it/s]"
    return {
        "ansi": b"\n".join(b"\x1b[2m" + ln + b"\x1b[0m" for ln in lines),
        "rank_prefix": b"\n".join(b"[rank3]:[W1122 05:00:00.123 ProcessGroup.cpp:1] " + ln for ln in lines),
        "crlf": b"\r\n".join(lines),
        "progress_bars": b"\n".join(bar + b"\n" + ln for ln in lines),
        "bad_bytes": b"\xff\xfe latin-1 caf\xe9 \x80\x81\n" + data + b"\n\xc3\x28 truncated utf-8 \xe2\x82\n",
        "long_prefix": (b"INFO step ok, nothing to see here, " * 3 + b"\n") * 50_000 + data,
    }


@pytest.mark.parametrize(("name", "expected"), real_cases())
def test_real_log_under_other_noise(name: str, expected: str) -> None:
    data = (REAL_LOGS / name).read_bytes()
    for kind, noisy in _noisy_variants(data).items():
        got = classify(RunFacts(scan=scan_stream(io.BytesIO(noisy)))).outcome
        assert got == expected, f"{name} with {kind}: {got}"


# ---- the engines' failures (envmatrix/facts/enginefailures.py): each known text, its cause and fix
ENGINE_LINES = {
    "ckpt_recompute": "[rank1]: torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the following tensors "
    "have different metadata than during the forward pass.",
    "scheduler_param_groups": "    for param_group, lr in zip(self.optimizer.param_groups, values, strict=True):\n"
    "ValueError: zip() argument 2 is longer than argument 1",
    "coordinator_trace": "[rank0]: IndexError: pop from an empty deque",
    "allgather_dtype": "TypeError: output tensor must have the same type as input tensor",
    "hook_grad_fn": "AttributeError: 'NoneType' object has no attribute 'next_functions'",
    "elastic_import": "ImportError: cannot import name '_get_socket_with_port' from 'torch.distributed.elastic.agent.server.api'",
    "unwrap_keep_torch_compile": "TypeError: Accelerator.unwrap_model() got an unexpected keyword argument 'keep_torch_compile'",
    "launcher_local_rank": "train.py: error: unrecognized arguments: --local-rank=0",
    "gym_step_api": "    observation, reward, done, info = env.step(action)\nValueError: too many values to unpack (expected 4)",
    "fsdp_unallocated": "RuntimeError: The tensor has a non-zero number of elements, but its data is not allocated yet. Caffe2 uses a lazy",
    "fsdp2_mixed_dtensor": "RuntimeError: aten.mm.default: got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor",
    "zero3_device_map": "ValueError: DeepSpeed Zero-3 is not compatible with passing a `device_map`.",
    "cpu_accelerator_ipex": "ValueError: CPU_Accelerator requires intel_extension_for_pytorch, which is not installed on this system.",
    "cpu_numactl": "FileNotFoundError: [Errno 2] No such file or directory: 'numactl'",
}


def test_every_engine_failure_has_a_test_line() -> None:
    assert set(ENGINE_LINES) == set(ENGINE_FAILURES)


@pytest.mark.parametrize("name", sorted(ENGINE_LINES))
def test_engine_failures_are_named_with_their_fix_and_source(name: str) -> None:
    verdict = classify(RunFacts(scan=scan_text("step 1 ok\n" + ENGINE_LINES[name] + "\n"), exit_code=1))
    assert verdict.outcome == ENGINE_FAILURES[name].outcome, verdict
    assert verdict.remedy.startswith(ENGINE_FAILURES[name].remedy) and ENGINE_FAILURES[name].sources[0] in verdict.remedy


def test_an_engine_import_failure_is_the_engine_not_a_missing_module() -> None:
    """`cannot import name` is also a missing-module text: the engine's known cause ranks first, as the class of its
    mechanism (deepspeed importing what torch removed: two releases, one rule for the table and users' logs)."""
    text = (
        "Traceback (most recent call last):\n  File \"x.py\", line 1\nImportError: cannot import name 'log' from 'torch.distributed.elastic.agent.server.api'\n"
    )
    assert log_class(text, exit_code=1) == Outcome.API_MISMATCH
    assert ENGINE_FAILURES["elastic_import"].outcome == ENGINE_FAILURES["unwrap_keep_torch_compile"].outcome == Outcome.API_MISMATCH
    assert ENGINE_FAILURES["coordinator_trace"].outcome == Outcome.ENGINE_ERROR
    assert log_class("ImportError: cannot import name 'foo' from 'bar'\n", exit_code=1) == Outcome.MISSING_MODULE
