"""Issue 41, sixth round: what the eighth to tenth held-out sets' misses taught. Each log here is written for its
mechanism (none is a held-out log): a message alone, a subclass named after its base, a class only the user's or the
model's remote code defines, a package the name index does not cover, a Windows path holding `\\n`, a guarded import's
NameError, and failures outside exceptions in the shapes users paste (NCCL's failed calls, ProcessGroupNCCL's fatal log
records, typographic quotes, a lower-cased refusal)."""

from __future__ import annotations

from envmatrix.verdict.boundary import Boundary, of
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text
from envmatrix.verdict.remedies import sentence

SITE = "/opt/conda/lib/python3.11/site-packages"


def judged(log: str) -> tuple[str, str]:
    v = classify(RunFacts(scan=scan_text(log.encode())))
    return v.outcome.value, v.remedy


def last(log: str) -> Boundary:
    found = [b for r in scan_text(log.encode()).raised if (b := of(r)) is not None]
    assert found, log
    return found[-1]


def test_an_import_message_alone_names_the_program_that_ran_and_the_package_imported_from() -> None:
    b = last("ImportError: cannot import name 'EncoderDecoderCache' from 'transformers' (/x/site-packages/transformers/__init__.py)\n")
    assert (b.caller, b.callee, b.who) == ("user", "transformers", "your code"), b
    assert "imports `EncoderDecoderCache` from transformers" in sentence(b, {})


def test_a_subclass_named_after_its_base_is_asked_for_what_the_base_has() -> None:
    b = last("AttributeError: 'MyLabGRPOTrainer' object has no attribute 'vllm_client'\n")
    assert (b.caller, b.callee) == ("user", "trl"), b
    assert "its name ends in GRPOTrainer" in b.callee_reason


def test_a_one_word_base_name_is_too_common_to_name_a_subclass() -> None:
    b = last("AttributeError: 'LabTrainer' object has no attribute 'foo_bar'\n")
    assert b.callee == "", b


def test_a_subclass_that_overrides_a_method_is_not_read_by_its_name() -> None:
    """A keyword a library passes to a method the subclass overrides is refused by the subclass's own code."""
    log = f"""Traceback (most recent call last):
  File "/home/u/lab/train.py", line 9, in <module>
    model.gradient_checkpointing_enable()
  File "{SITE}/transformers/modeling_utils.py", line 1872, in gradient_checkpointing_enable
    self._set_gradient_checkpointing(enable=True)
TypeError: LabPreTrainedModel._set_gradient_checkpointing() got an unexpected keyword argument 'enable'
"""
    b = last(log)
    assert (b.caller, b.callee, b.callee_who) == ("transformers", "user", "your code"), b
    assert "transformers calls into it" in b.callee_reason


def test_a_module_of_a_package_the_index_does_not_cover_is_named_by_its_installed_path() -> None:
    log = f"""Traceback (most recent call last):
  File "/srv/tagger/prep.py", line 3, in <module>
    x = ob.legacy(1)
  File "{SITE}/obscurelib/__init__.py", line 353, in __getattr__
    raise AttributeError(attr)
AttributeError: module 'obscurelib' has no attribute 'legacy'.
"""
    b = last(log)
    assert (b.caller, b.callee) == ("user", "obscurelib"), b
    assert "obscurelib/__init__.py" in b.callee_reason


def test_a_windows_path_holding_backslash_n_is_one_frame_not_a_flattened_traceback() -> None:
    log = r"""Traceback (most recent call last):
  File "C:\work\tagger\prep.py", line 3, in <module>
    x = np.float(1)
  File "C:\Users\nina\AppData\Local\Programs\Python\Python39\lib\site-packages\numpy\__init__.py", line 353, in __getattr__
    raise AttributeError(__former_attrs__[attr])
AttributeError: module 'numpy' has no attribute 'float'.
"""
    raised = scan_text(log.encode()).raised[-1]
    assert raised.frames[-1].path.endswith(r"site-packages\numpy\__init__.py"), raised.frames
    assert last(log).callee == "numpy"


def test_a_flattened_traceback_is_still_unflattened() -> None:
    log = 'error: "Traceback (most recent call last):\\n  File \\"/x/run.py\\", line 3, in <module>\\n    main()\\nValueError: bad"\n'
    assert [r.type for r in scan_text(log.encode()).raised] == ["ValueError"]


def test_a_name_error_over_another_packages_name_is_a_guarded_import_that_did_not_run() -> None:
    log = f"""Traceback (most recent call last):
  File "/home/u/run.py", line 4, in <module>
    cfg = get_peft_config(args)
  File "{SITE}/trl/trainer/utils.py", line 718, in get_peft_config
    peft_config = LoraConfig(
NameError: name 'LoraConfig' is not defined
"""
    outcome, remedy = judged(log)
    assert outcome == "missing_module", remedy
    assert remedy.startswith("LoraConfig is peft's") and "install peft" in remedy


def test_a_name_error_over_the_users_own_name_is_an_error() -> None:
    log = """Traceback (most recent call last):
  File "/home/u/run.py", line 4, in <module>
    print(totl)
NameError: name 'totl' is not defined
"""
    assert judged(log)[0] == "error"


def test_a_function_named_after_its_package_is_that_packages() -> None:
    """Several packages define `flash_attn_varlen_func` (engines vendor it); its name says flash_attn's."""
    log = """Traceback (most recent call last):
  File "/home/u/chat/models/llama.py", line 184, in forward
    out = flash_attn_varlen_func(q, k, v)
NameError: name 'flash_attn_varlen_func' is not defined
"""
    outcome, remedy = judged(log)
    assert outcome == "missing_module" and "flash_attn_varlen_func is flash-attn's" in remedy, remedy


def test_nccl_reporting_a_failed_call_is_a_collective_failure() -> None:
    log = """node1:2683:2780 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE
node1:2683:2826 [0] misc/ibvwrap.cc:268 NCCL WARN Call to ibv_create_qp failed
"""
    assert judged(log)[0] == "nccl_error"


def test_nccl_harmless_warnings_stay_harmless() -> None:
    log = "node1:2683:2780 [0] NCCL WARN NET/Plugin : No plugin found (libnccl-net.so), using internal implementation\n"
    assert judged(log)[0] != "nccl_error"


def test_process_group_ncclls_fatal_log_record_is_a_collective_failure_however_its_message_wraps() -> None:
    log = """[rank2]:[E101 10:00:00.123456 ProcessGroupNCCL.cpp:1700] [PG ID 0 PG GUID 0(default_pg) Rank 2] ProcessGroupNCCL'
s watchdog got st
uck for 480 seconds
[rank2]:[F101 10:08:00.123456 ProcessGroupNCCL.cpp:1554] [PG ID 0 PG GUID 0(default_pg) Rank 2] [PG ID 0 PG GUID 0
"""
    assert judged(log)[0] == "nccl_error"


def test_process_group_nccls_warning_record_is_not_a_failure() -> None:
    log = "[rank0]:[W101 10:00:00.1 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 0] using GPU 0 to perform barrier\n"
    assert judged(log)[0] != "nccl_error"


def test_typographic_quotes_do_not_hide_an_abi_or_a_missing_module() -> None:
    assert judged("it says “ImportError: /lib64/libstdc++.so.6: version `GLIBCXX_3.4.30’ not found (required by x.so)”\n")[0] == "import_abi"
    assert judged("import deepspeed gives:\n\nNo module named ‘deepspeed.ops’\n")[0] == "missing_module"


def test_a_lower_cased_bf16_refusal_is_still_the_gpu_refusing() -> None:
    log = "valueerror: bfloat16 is only supported on gpus with compute capability of at least 8.0. your tesla t4 gpu has compute capability 7.5.\n"
    assert judged(log)[0] == "unsupported_gpu"


def test_an_import_message_inside_a_sentence_or_quotes_is_that_import_error() -> None:
    """ComfyUI's `Error loading module X: …`, a quote inside a user's sentence, typographic quotes, prose after it."""
    for line in (
        "Error loading module Lab: cannot import name 'EncoderDecoderCache' from 'transformers' (/v/site-packages/transformers/__init__.py)",
        "it says \"ImportError: cannot import name 'EncoderDecoderCache' from 'transformers'\" when I run it",
        "Code error: cannot import name ‘EncoderDecoderCache’ from ‘transformers’. I checked the file.",
        "`ImportError: cannot import name 'EncoderDecoderCache' from 'transformers' `",
        "ImportError: cannot import name 'EncoderDecoderCache' from 'transformers',  how to solve this?",
    ):
        outcome, remedy = judged(line + "\n")
        assert outcome == "api_mismatch", (line, remedy)
        assert last(line + "\n").callee == "transformers", line


def test_an_exception_as_a_markdown_heading_is_read() -> None:
    assert judged("# AttributeError: 'Qwen2ForCausalLM' object has no attribute 'warnings_issued'\n\nSome text.\n")[0] == "api_mismatch"


def test_a_users_folder_named_like_an_installed_package_is_the_users_code() -> None:
    log = """Traceback (most recent call last):
  File "/home/u/proj/src/vllm/test.py", line 3, in <module>
    from sampler import S
  File "/home/u/proj/src/vllm/sampler.py", line 21, in <module>
    from vllm.sequence import SamplerOutput
ImportError: cannot import name 'SamplerOutput' from 'vllm.sequence' (/env/lib/python3.10/site-packages/vllm/sequence.py)
"""
    b = last(log)
    assert (b.caller, b.callee, b.who) == ("user", "vllm", "proj (your code)"), b


def test_a_range_a_package_states_with_nothing_else_failing_is_the_mismatch() -> None:
    for line in (
        "then it fails: liger-kernel requires transformers >= 4.52.0, got 4.48.2.",
        "Exception: sgl-kernel is installed with version 0.1.0, which is less than the minimum required version 0.1.1.",
    ):
        outcome, _ = judged(line + "\n")
        assert outcome == "api_mismatch", line


def test_a_range_the_installed_release_satisfies_is_no_failure() -> None:
    assert judged("trl 0.19.1 requires transformers>=4.46.0, but you have transformers 4.50.0\n")[0] == "inconclusive"


def test_a_range_in_a_run_that_trained_is_no_failure() -> None:
    log = "liger-kernel requires transformers >= 4.52.0, got 4.48.2\n" + "".join(f"{{'loss': 0.5, 'grad_norm': 0.{i + 1}, 'epoch': 0.{i}}}\n" for i in range(4))
    assert judged(log)[0] == "ok"


def test_container_runtime_lines_in_a_markdown_table_are_read() -> None:
    log = (
        "  |   | 2025-11-03T21:19:45.400542593+08:00 stderr F ImportError: cannot import name 'EncoderDecoderCache' "
        "from 'transformers' (/x/site-packages/transformers/__init__.py) |  \n"
    )
    assert judged(log)[0] == "api_mismatch"


def test_an_actor_frameworks_address_before_the_message_is_not_the_message() -> None:
    log = "AttributeError: [address=127.0.0.1:39577, pid=15865] 'Qwen2ForCausalLM' object has no attribute 'warnings_issued'\n"
    assert judged(log)[0] == "api_mismatch"
    assert last(log).callee == "transformers"


def test_an_exception_after_prose_without_a_colon_is_read() -> None:
    log = "Raises the error TypeError: Accelerator.__init__() got an unexpected keyword argument 'logging_dir'\n"
    assert judged(log)[0] == "api_mismatch"
    assert last(log).callee == "accelerate"


def test_a_kill_in_a_chinese_locale_and_an_infiniband_completion_error() -> None:
    assert judged("Writing metrics: /x/metrics.jsonl\n已杀死\n")[0] == "crash"
    assert judged("NET/IB : Got completion from peer 10.0.0.2<36315> with status=12 opcode=0 len=0 vendor err 129\n")[0] == "nccl_error"


def test_seventh_round_shapes_users_paste() -> None:
    """Each of these lost its class before: torch's OOM message without its first words, the kernel's cgroup OOM kill,
    any tensor index in autograd's refusal, apex halving a loss scale past 1e-10, zsh's lower-case SIGFPE, an exception in
    Markdown code or pytest's short summary or after a user's sentence, and a log pasted lower-cased."""
    cases = {
        "Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free)": "oom",
        "Memory cgroup out of memory: Killed process 629 (train) total-vm:14119556kB": "oom",
        "RuntimeError: element 1 of tensors does not require grad and does not have a grad_fn": "grad_lost",
        "Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 8.165126103939127e-202": "nan_loss",
        "20121 floating point exception (core dumped)  python train.py": "sigfpe",
        "saw error\n`TypeError: hf_hub_download() got an unexpected keyword argument 'use_auth_token'`": "api_mismatch",
        "FAILED tests/test_x.py::TestX::test_y - AttributeError: type object 'DynamicCache' has no attribute 'from_legacy_cache'": "api_mismatch",
        "when I run it, it emerge the error TypeError: GRPOTrainer.__init__() got an unexpected keyword argument 'tokenizer'.": "api_mismatch",
        "error message is (typeerror: grpotrainer.__init__() got an unexpected keyword argument 'tokenizer')": "api_mismatch",
    }
    for log, expected in cases.items():
        assert judged(log + "\n")[0] == expected, log


def test_healthy_apex_scaling_and_prose_stay_healthy() -> None:
    steps = "".join(f"{{'loss': 0.5, 'grad_norm': 0.{i + 1}, 'epoch': 0.{i}}}\n" for i in range(4))
    assert judged("Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 32768.0\n" + steps)[0] == "ok"
    assert judged("we retried after a ConnectionError: reset by peer\n" + steps)[0] == "ok"


def test_a_widely_installed_library_named_by_its_module_is_the_callee_without_a_path() -> None:
    b = last(">>> from toolbox.datasets import load\nAttributeError: module 'numpy' has no attribute 'float'.\n")
    assert (b.caller, b.callee) == ("user", "numpy"), b


def test_a_library_calling_a_patched_function_no_index_defines_calls_the_patch() -> None:
    log = f"""Traceback (most recent call last):
  File "/home/u/run.py", line 9, in <module>
    model.generate(x)
  File "{SITE}/transformers/generation/utils.py", line 3007, in _sample
    outputs = self(**model_inputs, return_dict=True)
  File "{SITE}/torch/nn/modules/module.py", line 1750, in _call_impl
    return forward_call(*args, **kwargs)
TypeError: patched_llama_forward() got an unexpected keyword argument 'cache_position'
"""
    b = last(log)
    assert (b.caller, b.callee_who) == ("transformers", "your code"), b


def test_a_short_output_that_is_one_token_and_nothing_else_is_garbled() -> None:
    ids = ", ".join(["563"] * 10)
    line = f"outputs=[CompletionOutput(index=0, text=' is is is is is is is is is is', token_ids=[{ids}], finish_reason=length)]"
    assert judged(line + "\n")[0] == "garbled_output"
    assert judged("2. inference result: <unk><unk><unk><unk>...\n")[0] == "garbled_output"


def test_short_repetition_that_is_text_is_not_garbled() -> None:
    assert judged("outputs=[CompletionOutput(index=0, text=' yes yes yes', finish_reason=stop)]\n")[0] == "inconclusive"
    assert judged("result: ok ok\n")[0] == "inconclusive"


def test_a_keyword_type_error_a_logger_printed_without_its_type_is_that_type_error() -> None:
    log = "Running benchmark\nEngine loop error: GRPOTrainer.__init__() got an unexpected keyword argument 'tokenizer'\n"
    assert judged(log)[0] == "api_mismatch"
    assert last(log).callee == "trl"


def test_eighth_round_shapes() -> None:
    """An unquoted module (`module trl has no attribute GRPOConfig`), an inner attribute error ending in a full stop
    under the lazy-import wrapper, and DeepSpeed's loss scale halved down to 2."""
    assert judged("AttributeError: module trl has no attribute GRPOConfig. Did you mean: 'ORPOConfig'?\n")[0] == "api_mismatch"
    log = (
        "RuntimeError: Failed to import trl.trainer.dpo_trainer because of the following error (look up to see its traceback):\n"
        "'Qwen2ForCausalLM' object has no attribute 'warnings_issued'.\n"
    )
    assert judged(log)[0] == "api_mismatch"
    scale = "".join(f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {2 * s}, reducing to {s}\n" for s in (32, 16, 8, 4, 2))
    assert judged(scale)[0] == "nan_loss"
    assert judged("[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n")[0] == "inconclusive"


def test_ninth_round_shapes() -> None:
    """`cannot import name` with no `from` resolved as any name is; an attribute refusal inside a sentence; a frame
    line opened by Markdown code; xFormers' notice that its compiled part does not load."""
    assert judged("ImportError: cannot import name 'AutoModelForVision2Seq'\n")[0] == "api_mismatch"
    assert judged("提示Qwen2TokenizerFast has no attribute all_special_tokens_extended\n")[0] == "api_mismatch"
    log = (
        f'` [rank0]:   File "{SITE}/torch/distributed/fsdp/_flat_param.py", line 770, in _validate_tensors_to_flatten\n'
        "[rank0]:     raise ValueError(\n"
        "[rank0]: ValueError: Must flatten tensors with uniform dtype but got torch.bfloat16 and torch.float32`\n"
    )
    assert judged(log)[0] == "engine_error"
    assert judged("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n")[0] == "import_abi"


def test_prose_about_a_missing_attribute_in_lower_case_is_no_exception() -> None:
    steps = "".join(f"{{'loss': 0.5, 'grad_norm': 0.{i + 1}, 'epoch': 0.{i}}}\n" for i in range(4))
    assert judged("note: the config has no attribute foo, so the default is used\n" + steps)[0] == "ok"
