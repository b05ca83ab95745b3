"""The verdict judges mechanisms, not wordings: failures written here in words no rule names (invented for these tests,
never taken from a corpus) are named by the structure of the log: which package raised, which called it, the exception's
type, a library's error code, a package's own range statement."""

from __future__ import annotations

from typing import Any

import pytest

from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.evidence import facts
from envmatrix.verdict.logscan import scan_text

SP = "/opt/conda/envs/rl/lib/python3.11/site-packages"


def tb(*frames: tuple[str, int, str], exc: str, prefix: str = "") -> str:
    """A CPython traceback: frames (path, line, function), then the exception line, each behind `prefix`."""
    lines = ["Traceback (most recent call last):"]
    for path, line, func in frames:
        lines += [f'  File "{path}", line {line}, in {func}', "    do_something()"]
    lines.append(exc)
    return "\n".join(prefix + line for line in lines) + "\n"


def verdict(text: str, **kw: Any) -> Any:
    return classify(RunFacts(scan=scan_text(text), **kw))


USER = ("/home/me/grpo/train.py", 40, "main")


@pytest.mark.parametrize(
    ("log", "expected", "in_evidence"),
    [
        # a trainer calling an engine with an argument the installed release dropped
        (
            tb(USER, (f"{SP}/trl/trainer/rollout.py", 210, "_sync"), exc="TypeError: LLM.sleep() got an unexpected keyword argument 'tags'"),
            "api_mismatch",
            "caller trl, callee vllm",
        ),
        # a model's forward missing an argument a newer caller passes positionally
        (
            tb(
                USER,
                (f"{SP}/peft/tuners/lora/model.py", 88, "forward"),
                exc="TypeError: Block.forward() missing 2 required positional arguments: 'cos' and 'sin'",
            ),
            "api_mismatch",
            "peft",
        ),
        (
            tb(USER, (f"{SP}/accelerate/utils/other.py", 12, "x"), exc="AttributeError: module 'torch.cuda.amp' has no attribute 'custom_fwd2'"),
            "api_mismatch",
            "accelerate",
        ),
        (tb(USER, exc="AttributeError: 'Qwen9Config' object has no attribute 'rope_scaling_v2'"), "api_mismatch", "Qwen9Config"),
        # a plain bug is not a mismatch
        (tb(USER, exc="AttributeError: 'NoneType' object has no attribute 'shape'"), "error", "NoneType"),
        # a package's own statement of the range it needs, raised
        (
            "ImportError: tokenizers>=0.99,<0.100 is required for a normal functioning of this module, but found tokenizers==0.23.2.\n",
            "api_mismatch",
            "tokenizers",
        ),
        # an engine's frames, a wording no list has
        (
            tb(USER, (f"{SP}/deepspeed/runtime/zero/stage_1_and_2.py", 1201, "reduce_ipg_grads"), exc="AssertionError: bucket 7 was reduced before it filled"),
            "engine_error",
            "deepspeed",
        ),
        (
            tb(USER, (f"{SP}/torch/distributed/fsdp/_flat_param.py", 300, "_init"), exc="RuntimeError: sharded views disagree on the storage offset"),
            "engine_error",
            "fsdp",
        ),
        (tb(USER, (f"{SP}/vllm/v1/worker/gpu_worker.py", 77, "load"), exc="RuntimeError: the sampler state went stale between steps"), "engine_error", "vllm"),
        # a missing module in an install hint's own words
        (
            tb(USER, exc="RuntimeError: liger_kernel is not available in this environment; please install it to use fused linear CE"),
            "missing_module",
            "liger_kernel",
        ),
        # CUDA in numbered, enum and message forms
        ('CUDA error at kernels/attn.cu:88 code=716(cudaErrorMisalignedAddress) "cudaDeviceSynchronize()"\n', "crash", "cudaErrorMisalignedAddress"),
        ("RuntimeError: CUDA driver error: an illegal instruction was encountered\n", "crash", "715"),
        ("RuntimeError: cuBLAS failed with status CUBLAS_STATUS_ALLOC_FAILED\n", "oom", "CUBLAS_STATUS_ALLOC_FAILED"),
        ("E: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH while creating the context\n", "driver_too_old", "803"),
        ("[rank3]: RuntimeError: CUDA error: no kernel image is available for execution on the device\n", "unsupported_gpu", "209"),
        # memory in an engine's words, no "out of memory" anywhere
        (
            tb(
                USER,
                (f"{SP}/sglang/srt/mem_cache/pool.py", 20, "alloc"),
                exc="RuntimeError: Not enough memory for the KV cache pool: raise mem_fraction_static",
            ),
            "oom",
            "sglang",
        ),
        ("ValueError: The request needs 40000 tokens, more than the 16384 that fit in the KV cache blocks available\n", "oom", "KV cache"),
        # NCCL through another wrapper's wording
        (
            tb(
                USER,
                (f"{SP}/vllm/distributed/device_communicators/pynccl.py", 130, "all_reduce"),
                exc="RuntimeError: NCCL error: remote process exited or there was a network error",
            ),
            "nccl_error",
            "ncclRemoteError",
        ),
        # a GPU too old in a compiler's and an engine's words
        ("triton.compiler.errors.CompilationError: at 3:4: type bf16 is not supported on sm_70 targets\n", "unsupported_gpu", "sm_70"),
        ("ValueError: FP8 weights need a GPU of compute capability 8.9 or above; this one is 8.0\n", "unsupported_gpu", "8.9"),
        # a kernel's own assertion, printed by the device before the process dies: a device-side assert (CUDA 710)
        (
            "epoch 3: 41%|████ | 410/1000\n/src/kernels/gather.cu:77: gatherKernel: block: [12,0,0], thread: [5,0,0] Assertion `idx < n` failed.\n",
            "crash",
            "cudaErrorAssert",
        ),
        # an engine logs the cause and raises; the traceback is cut before its exception line
        (
            "ERROR 03-04 05:06:07 [worker.py:88] fp8 kernels need a GPU of compute capability 8.9 or newer; this device is sm_80\n"
            + tb(USER, (f"{SP}/sglang/srt/model_executor/runner.py", 31, "__init__"), exc=""),
            "unsupported_gpu",
            "8.9",
        ),
        # exception lines behind logger prefixes are exceptions, so the run failed
        ("2026-01-02 03:04:05,678 - trainer - ERROR - KeyError: 'input_ids'\n", "error", "KeyError"),
        ("(RolloutWorker pid=4242) [2026-01-02 03:04:05] ValueError: reward function returned 3 values for 4 completions\n", "error", "ValueError"),
        ("INFO 01-02 03:04:05 [engine.py:99] starting\nERROR 01-02 03:04:06 [core.py:12] ZeroDivisionError: division by zero\n", "error", "ZeroDivisionError"),
    ],
)
def test_mechanism(log: str, expected: str, in_evidence: str) -> None:
    v = verdict(log)
    assert v.outcome == expected, v
    assert in_evidence.lower() in (v.evidence + v.remedy).lower(), v


def test_interleaved_ranks_keep_their_own_frames() -> None:
    a = tb(USER, (f"{SP}/deepspeed/runtime/engine.py", 10, "step"), exc="AssertionError: rank zero saw a partial bucket", prefix="[rank0]: ").splitlines()
    b = tb(USER, (f"{SP}/trl/trainer/grpo_trainer.py", 20, "log"), exc="KeyError: 'rewards'", prefix="[rank1]: ").splitlines()
    mixed = "\n".join(x for pair in zip(a, b, strict=True) for x in pair) + "\n"
    shown = facts(scan_text(mixed))["exceptions"]
    by_type = {e["type"]: e for e in shown}
    assert by_type["AssertionError"]["raising_package"] == "deepspeed" and by_type["AssertionError"]["stream"] == "rank0"
    assert by_type["KeyError"]["raising_package"] == "trl" and by_type["KeyError"]["stream"] == "rank1"


def test_a_traceback_flattened_onto_one_line_is_read() -> None:
    flat = (
        '{"level": "error", "traceback": "Traceback (most recent call last):\\n  File \\"' + SP + '/deepspeed/runtime/engine.py\\", '
        'line 5, in backward\\n    x()\\nAssertionError: gradients were not averaged"}\n'
    )
    v = verdict(flat)
    assert v.outcome == "engine_error" and "deepspeed" in v.evidence


def test_a_range_statement_explains_the_exception_raised_in_that_package() -> None:
    warning = f"{SP}/trl/import_utils.py:71: UserWarning: TRL currently supports vLLM versions: 0.22.0, 0.31.0. You have version 0.32.0 installed.\n"
    log = warning + tb(
        USER, (f"{SP}/trl/trainer/grpo_trainer.py", 9, "_move"), (f"{SP}/vllm/worker/model_runner.py", 5, "sync"), exc="RuntimeError: shapes do not line up"
    )
    v = verdict(log)
    assert v.outcome == "api_mismatch" and "0.32.0 is installed" in v.evidence and "TRL" in v.remedy


def test_one_zero_gradient_step_proves_nothing_two_do() -> None:
    one = "{'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0}\n{'loss': 0.01, 'grad_norm': 0.42, 'reward_std': 0.3}\n"
    assert verdict(one).outcome == "ok"
    assert verdict("{'loss': 0.0, 'grad_norm': 0.0}\n").outcome == "inconclusive"
    assert verdict("{'loss': 0.0, 'grad_norm': 0.0}\n" * 2).outcome == "zero_grad"


def test_a_nan_after_healthy_steps_is_divergence_not_group_size() -> None:
    healthy = "".join(f"{{'loss': 0.{i}, 'grad_norm': 0.{i + 1}, 'step': {i}}}\n" for i in range(1, 7))
    v = verdict(healthy + "{'loss': nan, 'grad_norm': nan, 'step': 7}\n")
    assert v.outcome == "nan_loss" and "diverged" in v.remedy and "num_generations" not in v.remedy
    early = verdict("{'loss': nan, 'grad_norm': nan, 'step': 1}\n")
    assert early.outcome == "nan_loss" and "diverged" not in early.remedy


def test_a_log_with_an_exception_is_never_inconclusive() -> None:
    assert verdict("[2026-01-01 00:00:00] [INFO] [trainer.py:12] MyCustomFailure: the batch had no prompts\n").outcome == "error"


def test_teardown_noise_does_not_fail_a_healthy_run() -> None:
    healthy = "{'loss': 0.01, 'grad_norm': 0.4}\n{'loss': 0.02, 'grad_norm': 0.3}\n"
    noise = (
        "Exception ignored in: <function Pool.__del__ at 0x7f>\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.11/multiprocessing/pool.py", line 268, in __del__\n'
        "AttributeError: 'NoneType' object has no attribute 'Empty'\n"
    )
    assert verdict(healthy + noise).outcome == "ok"


def test_unsupported_gpu_remedy_says_what_the_gpu_lacks() -> None:
    v = verdict("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla V100 GPU has compute capability 7.0.\n")
    assert v.outcome == "unsupported_gpu" and "7.0" in v.remedy and "fp16" in v.remedy


def test_facts_show_why() -> None:
    log = tb(
        USER,
        (f"{SP}/trl/trainer/grpo_trainer.py", 1, "a"),
        (f"{SP}/vllm/model_executor/layers/linear.py", 2, "b"),
        exc="AttributeError: 'Parameter' object has no attribute 'weight_loader'",
    )
    shown = facts(scan_text(log + "NCCL WARN ncclInternalError in teardown\n"))
    e = shown["exceptions"][0]
    assert (e["type"], e["raising_package"], e["caller_package"], e["class"]) == ("AttributeError", "vllm", "trl", "api_mismatch")
    assert e["raising_frame"] == "vllm.model_executor.layers.linear.b" and e["rule"] == "api_mismatch:attribute"
    assert [c["name"] for c in shown["codes"]] == ["ncclInternalError"]


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("terminate called after throwing an instance of 'c10::OutOfMemoryError'\n  what():  CUDA out of memory on device 2\n", "oom"),
        ("terminate called after throwing an instance of 'c10::DistBackendError'\n  what():  [PG 0 Rank 3] Process group watchdog gave up\n", "nccl_error"),
        ("slurmstepd: error: *** JOB 4242 ON gpu-07 CANCELLED AT 2026-01-02T03:04:05 DUE TO TIME LIMIT ***\n", "timeout"),
        ("[Tue Jan  2 03:04:05 2026] Out of memory: Killed process 4242 (python) total-vm:812341234kB\n", "oom"),
        ("RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.\n", "nan_loss"),
        ("[deepspeed] OVERFLOW! Rank 0 Skipping step. Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n", "nan_loss"),
        (tb(USER, (f"{SP}/transformers/models/auto/configuration_auto.py", 1000, "__getitem__"), exc="KeyError: 'qwen9_moe'"), "unknown_model"),
        ("ValueError: loss has inf values after step 12; aborting\n", "nan_loss"),
        ("train.sh: line 9: 4242 Aborted (core dumped) python train.py\n", "crash"),
    ],
)
def test_more_layers_words(log: str, expected: str) -> None:
    assert verdict(log).outcome == expected, verdict(log)


def test_the_watchdogs_abort_after_an_nccl_failure_is_not_the_cause() -> None:
    log = "[rank1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)\ntrain.sh: line 9: 4242 Aborted (core dumped) python train.py\n"
    assert verdict(log).outcome == "nccl_error"


def test_log_records_after_an_exception_are_not_its_message() -> None:
    log = (
        "ValueError: the reward function returned 3 scores for 4 completions\n"
        "gpu-07:4242:4300 [0] NCCL INFO comm 0x5 rank 0 nranks 8 - Destroy COMPLETE\n"
        "2026-01-02 03:04:05 WARNING NCCL watchdog shutting down\n"
    )
    v = verdict(log)
    assert v.outcome == "error" and "reward function" in v.evidence


def test_an_info_record_before_a_cut_traceback_is_not_its_message() -> None:
    """Only an ERROR-level record announces what a cut traceback raised; an INFO line above it is just a log line."""
    log = "INFO 03-04 05:06:07 [runner.py:9] KV cache too small for 4096 tokens? checking\n" + tb(
        USER, (f"{SP}/vllm/engine/llm_engine.py", 274, "__init__"), exc=""
    )
    assert verdict(log).outcome != "oom"


@pytest.mark.parametrize(
    ("line", "expected", "outcome"),
    [
        # `top` imported (Python names the first missing part), so the installed release lacks the submodule
        ("ModuleNotFoundError: No module named 'accelerate.utils.deepspeed_v9'", "the module accelerate.utils.deepspeed_v9", "api_mismatch"),
        ("ModuleNotFoundError: No module named 'vllm._C'", "compiled module vllm._C", "missing_module"),
        ("ModuleNotFoundError: No module named 'liger_kernel'", "pip install liger-kernel", "missing_module"),
        ("ModuleNotFoundError: No module named 'myproject.rewards'", "pip install myproject", "missing_module"),
    ],
)
def test_an_import_failure_knows_what_python_already_imported(line: str, expected: str, outcome: str) -> None:
    v = verdict(tb(USER, exc=line))
    assert v.outcome == outcome and expected in v.remedy, v


def test_the_importer_of_a_missing_name_is_read_from_a_source_checkout() -> None:
    log = tb(("/work/Megatron-LM/megatron/core/utils.py", 13, "<module>"), exc="ImportError: cannot import name 'get_widget' from 'deepspeed'")
    v = verdict(log)
    assert v.outcome == "api_mismatch" and "megatron-core imports `get_widget` from deepspeed" in v.remedy, v


def test_a_generic_accessor_raises_for_the_package_that_asked() -> None:
    """torch's Module.__getattr__ raises every missing attribute of a model: the package that asked is the one whose
    expectation the installed release does not meet (trl asking transformers' model for what 5.x removed)."""
    log = tb(
        USER,
        (f"{SP}/trl/trainer/grpo_trainer.py", 400, "__init__"),
        (f"{SP}/torch/nn/modules/module.py", 1940, "__getattr__"),
        exc="AttributeError: 'Qwen2ForCausalLM' object has no attribute 'warnings_given'",
    )
    v = verdict(log)
    assert v.outcome == "api_mismatch" and "caller trl, callee transformers" in v.evidence, v
    assert "trl asks transformers' Qwen2ForCausalLM for `warnings_given`" in v.remedy, v


def test_a_library_asking_a_class_no_index_knows_asks_the_users_or_the_remote_code() -> None:
    """transformers calling back into a model class no indexed release defines (a model's remote code, the user's own
    class): the callee is that code, and the advice is to update it or install the release it was written for."""
    log = tb(
        USER,
        (f"{SP}/transformers/modeling_utils.py", 1872, "gradient_checkpointing_enable"),
        exc="TypeError: ChatGLMPreTrainedModel._set_gradient_checkpointing() got an unexpected keyword argument 'enable'",
    )
    v = verdict(log)
    assert v.outcome == "api_mismatch" and "caller transformers, callee your code" in v.evidence, v
    assert "which your code does not take: update that class (or the model's remote code" in v.remedy, v


def test_torchs_module_attribute_error_is_an_attribute_error() -> None:
    """torch < 1.8 raised `ModuleAttributeError(AttributeError)` from `Module.__getattr__`: the same API mismatch."""
    frame = ("/usr/lib/python3.8/site-packages/transformers/trainer.py", 937, "train")
    exc = "torch.nn.modules.module.ModuleAttributeError: 'DeepSpeedEngine' object has no attribute 'no_sync'"
    assert verdict(tb(frame, exc=exc)).outcome == "api_mismatch"
    renamed = exc.replace("torch.nn.modules.module.ModuleAttributeError", "torch.nn.modules.module.ModuleLookupFailure")
    assert verdict(tb(frame, exc=renamed)).outcome != "api_mismatch"


def test_healthy_training_with_nccl_info_lines_stays_ok() -> None:
    info = (
        "node1:123:123 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
        "node1:123:123 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n"
        "node1:123:456 [0] NCCL INFO Channel 00/02 :    0   1\n"
        "node1:123:456 [0] NCCL INFO comm 0x55 rank 0 nranks 2 cudaDev 0 busId 1000 - Init COMPLETE\n"
    )
    healthy = "{'loss': 0.01, 'grad_norm': 0.4}\n{'loss': 0.02, 'grad_norm': 0.3}\n"
    assert verdict(info + healthy).outcome == "ok"


@pytest.mark.parametrize(
    "line",
    [
        "[rank11]:[E ProcessGroupNCCL.cpp:1537] [PG 1 Rank 11] Timeout at NCCL work: 15734, last enqueued NCCL work: 15735",
        "hpc-25-14:18569:18835 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 ranks has already checked in",
    ],
)
def test_nccl_failures_printed_as_log_records_are_nccl_errors(line: str) -> None:
    info = "node1:123:123 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
    assert verdict(info + line + "\n").outcome == "nccl_error"


def test_an_unexpected_raylet_termination_is_a_crash() -> None:
    line = (
        "2022-11-02 02:42:14,808 WARNING worker.py:1849 -- Raylet is terminated: ip=10.0.0.1, id=6ad3. Termination is "
        "unexpected. Possible reasons include: (1) SIGKILL by the user or system OOM killer\n"
    )
    assert verdict(line).outcome == "crash"
