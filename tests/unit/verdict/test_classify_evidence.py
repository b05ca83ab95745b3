"""`ok` needs evidence of training; unknown errors are errors; signatures by kind; remedies follow the cause."""

from __future__ import annotations

import os
import random
from typing import Any

import pytest

from envmatrix.records.outcomes import TABLE, Outcome
from envmatrix.records.probe_result import ProbeResult
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text

WARNINGS = (
    "/x/transformers/modeling_utils.py:1: UserWarning: `torch_dtype` is deprecated! Use `dtype` instead!\n"
    "FutureWarning: `tokenizer` is deprecated and will be removed in version 5.0.0\n"
    "[W1122 05:00:00.123 ProcessGroupNCCL.cpp:4561] Warning: using GPU 0 to perform barrier as devices used by this process are currently unknown.\n"
)


def verdict(text: str | bytes, **kw: Any) -> Any:
    return classify(RunFacts(scan=scan_text(text), **kw))


# ---- ok needs positive evidence -------------------------------------------------------------------


@pytest.mark.parametrize("exit_code", [None, 0])
def test_no_evidence_is_inconclusive_and_says_what_is_missing(exit_code: int | None) -> None:
    for log in ("", WARNINGS, "loading checkpoint shards: 100%|##########| 4/4\n", os.urandom(4096)):
        v = verdict(log, exit_code=exit_code)
        assert v.outcome == "inconclusive" and "no evidence of training" in v.evidence and v.remedy == TABLE[Outcome.INCONCLUSIVE].remedy


def test_random_bytes_never_ok() -> None:
    rng = random.Random(18)
    for _ in range(50):
        data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
        assert verdict(data).outcome != "ok"


def test_healthy_grpo_with_zero_loss_stays_ok() -> None:
    v = verdict(WARNINGS + "{'loss': 0.0, 'grad_norm': 0.0873, 'reward': 0.4, 'reward_std': 0.3}\n{'loss': 0.0, 'grad_norm': 0.11}\n")
    assert v.outcome == "ok" and "grad_norm 0.0873 > 0" in v.evidence


def test_probe_that_finished_no_step_is_not_ok() -> None:
    v = classify(RunFacts(probe=ProbeResult.parse({"finished": True, "steps_completed": 0}), exit_code=0))
    assert v.outcome == "inconclusive" and "no completed step" in v.evidence


# ---- unknown errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "RuntimeError: shape '[4, -1, 128]' is invalid for input of size 1000",
        "[rank1]: RuntimeError: something nobody has seen before",
        "[rank0]:[E1122 05:00:00.1 x.cpp:1] ValueError: Cannot use chat template functions because tokenizer.chat_template is not set",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "AssertionError",
        "\x1b[1;35mKeyError\x1b[0m: \x1b[35m'input_ids'\x1b[0m",
    ],
)
def test_unknown_error_line_is_error_quoting_it(line: str) -> None:
    v = verdict(WARNINGS + "{'loss': 0.3, 'grad_norm': 0.2}\n" + line + "\n")
    assert v.outcome == "error" and v.evidence.startswith("line 5: ") and "\x1b" not in v.evidence


def test_error_words_inside_a_line_are_not_errors() -> None:
    assert verdict("INFO retrying after a ConnectionError: reset by peer\n{'loss': 0.3, 'grad_norm': 0.2}\n").outcome == "ok"


# ---- signatures by kind -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("RuntimeError: CUDA error: out of memory", "oom"),
        ("RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingHostAllocator.cpp:278", "oom"),
        ("CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' in https://docs.nvidia.com/cuda/", "oom"),
        ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.31 GiB.", "oom"),
        ("RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB", "oom"),
        ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.", "oom"),
        ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`", "oom"),
        ("RuntimeError: FlashAttention backward for head dim > 192 requires A100/A800 or H100/H800", "unsupported_gpu"),
        ("RuntimeError: FlashAttention backward for head dim 256 requires A100 or H100", "unsupported_gpu"),
        ("RuntimeError: Expected is_sm8x || is_sm90 to be true, but got false.", "unsupported_gpu"),
        ("RuntimeError: cuda runtime error (35) : CUDA driver version is insufficient for CUDA runtime version", "driver_too_old"),
        ("{'train/loss': nan, 'train/grad_norm': 0.5}", "nan_loss"),
        ("{'policy_loss': nan, 'grad_norm': 0.4}", "nan_loss"),
        ("step 3: loss=tensor(nan, device='cuda:0', grad_fn=<MeanBackward0>)", "nan_loss"),
        ("step:1 - critic/vf_loss:nan - actor/grad_norm:9.819", "nan_loss"),
        ("iteration 5 | loss scale: 1.0 | grad norm: nan |", "nan_loss"),
        ("step 11 | loss 2.3224 | grad_norm     nan", "nan_loss"),
    ],
)
def test_signature_kinds(line: str, expected: str) -> None:
    assert verdict(line + "\n").outcome == expected


def test_loss_scale_inf_is_not_a_nan_loss() -> None:
    assert verdict("{'loss_scale': inf, 'loss': 0.2, 'grad_norm': 0.4}\n").outcome == "ok"


# ---- remedies follow the cause ------------------------------------------------------------------------


def probe(**options: Any) -> dict[str, Any]:
    return {"finished": True, "steps_completed": 3, "options": options, "env": {}}


ZERO = tuple({"step": i, "grad_norm": 0.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0} for i in (1, 2, 3))


def test_zero_grad_from_near_greedy_sampling_names_the_settings() -> None:
    v = classify(RunFacts(probe=ProbeResult.parse(probe(temperature=0.01, top_p=0.001)), metrics=ZERO, exit_code=0))
    assert v.outcome == "zero_grad" and "temperature 0.01, top_p 0.001" in v.remedy


def test_zero_grad_after_garbled_output_points_at_attention() -> None:
    text = "completion ids: " + ", ".join(["33"] * 30) + "\n{'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0}\n" * 2
    v = verdict(text)
    assert v.outcome == "garbled_output" and "zero_grad" in v.also  # the root cause wins, and the remedy says why
    assert v.remedy.startswith("the zero gradients follow from the garbled completions") and "sdpa" in v.remedy
    v = classify(RunFacts(probe=ProbeResult.parse({**probe(temperature=1.0), "samples": ["x " * 40]}), metrics=ZERO, exit_code=0))
    assert v.outcome == "garbled_output" and v.remedy.startswith("the zero gradients follow")


def test_nan_with_one_generation_says_so() -> None:
    res = {**probe(num_generations=1), "first_nonfinite_step": 1}
    v = classify(RunFacts(probe=ProbeResult.parse(res), metrics=({"step": 1, "loss": float("nan"), "grad_norm": float("nan")},), exit_code=0))
    assert v.outcome == "nan_loss" and "num_generations is 1" in v.remedy
    assert "num_generations is 1" in verdict("GRPOConfig(num_generations=1, ...)\n{'loss': nan, 'grad_norm': nan}\n").remedy


def test_nan_with_gemma2_and_flash_attn_names_the_release() -> None:
    log = "loading google/gemma-2-9b with attn_implementation=flash_attention_2\n{'loss': 2.31, 'grad_norm': nan}\n"
    assert verdict(log).remedy.startswith("Gemma-2 with flash-attn: use flash-attn >= 2.6.3")
    assert verdict("{'loss': 2.31, 'grad_norm': nan}\n").remedy == TABLE[Outcome.NAN_LOSS].remedy


def test_sigfpe_with_an_old_cublas_names_the_version() -> None:
    log = "nvidia-cublas-cu12==12.1.3.1\n[h:1:0:1] Caught signal 8 (Floating point exception: integer divide by zero)\n"
    v = verdict(log)
    assert v.outcome == "sigfpe" and "cuBLAS 12.1.3.1 is loaded" in v.remedy
    assert verdict("nvidia-cublas-cu12==12.4.5.8\nCaught signal 8 (x)\n").remedy == TABLE[Outcome.SIGFPE].remedy
    assert "cuBLAS 12.4.2.65 is loaded" in verdict("libcublasLt.so.12.4.2.65\nCaught signal 8 (x)\n").remedy


def test_malformed_probe_fields_are_ignored() -> None:
    bad = {"finished": True, "steps_completed": 2, "samples": 5, "options": "temperature=0", "env": ["x"]}
    assert classify(RunFacts(probe=ProbeResult.parse(bad), metrics=({"step": 1, "grad_norm": 0.3},), exit_code=0)).outcome == "ok"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory", "import_abi"),
        ("Found GPU0 Tesla K80 which is of cuda capability 3.7. PyTorch no longer supports this GPU because it is too old.", "unsupported_gpu"),
        ("mmdet - ERROR - loss is nan, stopping training", "nan_loss"),
        ("[E ProcessGroupNCCL.cpp:1] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels", "nccl_error"),
        ("RuntimeError: NCCL Error 2: unhandled system error", "nccl_error"),
        ("[rank0]: ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress", "nccl_error"),
        ("train.sh: line 3: 4242 Killed                  python train.py", "crash"),
        ("Exception: the reward function returned None", "error"),
    ],
)
def test_older_and_newer_wordings(line: str, expected: str) -> None:
    assert verdict(line + "\n").outcome == expected


# ---- the probe's real-size kernel stage and families ------------------------------------------------


def _kernel_facts(problem: str) -> RunFacts:
    label = {"model": "qwen2.5-7b", "op": "mlp_up", "dtype": "bf16", "seq": 2048}
    failure = {**label, "problem": problem, **({"error": "RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED"} if problem == "raised" else {})}
    result = {"finished": True, "steps_completed": 2, "kernels": {"checked": 90, "failures": [failure]}}
    return RunFacts(exit_code=0, probe=ProbeResult.parse(result), metrics=({"step": 1, "grad_norm": 0.5, "loss": 0.1},))


@pytest.mark.parametrize(("problem", "outcome"), [("non_finite", "nan_loss"), ("mismatch", "garbled_output"), ("raised", "error")])
def test_kernel_stage_failures_are_classified_with_their_shape(problem: str, outcome: str) -> None:
    verdict = classify(_kernel_facts(problem))
    assert verdict.outcome == outcome and "qwen2.5-7b" in verdict.evidence and "seq=2048" in verdict.evidence


def test_sigfpe_in_the_kernel_stage_names_the_shape() -> None:
    result = {"finished": False, "stage": "kernels", "kernels": {"running": {"model": "llama-3-8b", "op": "attn_qkv", "dtype": "fp16"}}}
    verdict = classify(RunFacts(exit_code=-8, probe=ProbeResult.parse(result)))
    assert verdict.outcome == "sigfpe" and "llama-3-8b" in verdict.evidence


def test_parity_failure_names_the_family_and_path() -> None:
    parity = {"within_tolerance": False, "family": "gemma2", "path": "text", "implementation": "sdpa", "dtype": "fp32"}
    parity |= {"rel_err": 0.0308, "tolerance": 1e-5, "baseline_rel_err": 0.0}
    verdict = classify(RunFacts(exit_code=0, probe=ProbeResult.parse({"finished": True, "steps_completed": 4, "parity": parity})))
    assert verdict.outcome == "garbled_output" and "gemma2 (text path) sdpa" in verdict.evidence


def test_gemma2_softcap_parity_failure_gets_the_softcap_remedy_not_the_flash_attn_one() -> None:
    parity = {"within_tolerance": False, "family": "gemma2", "path": "text", "implementation": "sdpa", "dtype": "fp32"}
    parity |= {"rel_err": 0.0308, "tolerance": 1e-5, "baseline_rel_err": 0.0}
    verdict = classify(RunFacts(exit_code=0, probe=ProbeResult.parse({"finished": True, "steps_completed": 4, "parity": parity, "options": {"attn": "sdpa"}})))
    assert "softcapping" in verdict.remedy and "eager" in verdict.remedy and "pip install flash-attn" not in verdict.remedy
