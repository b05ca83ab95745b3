"""Issue 41, third round: the mechanisms the fifth held-out set's misses taught (heldout-logs-5/README.md, "What happened
next"). Each log here is written for its mechanism (none is a held-out log): a lazy-import wrapper over the error it
wraps, NCCL's error-code trace and failed WARN lines, the raylet's count of OOM kills, an IPython frame under `~/` in a
model's remote code, and an exception line with no trace of its caller."""

from __future__ import annotations

import pytest
from verdicts import last_boundary, verdict

from envmatrix.verdict.boundary import project_of

SITE = "/opt/conda/lib/python3.10/site-packages"


LAZY = f"""  File "{SITE}/transformers/utils/import_utils.py", line 1284, in _get_module
    raise RuntimeError(
RuntimeError: Failed to import transformers.{{module}} because of the following error (look up to see its traceback):
{{inner}}
"""


def test_a_lazy_import_wrapper_over_a_missing_name_is_that_mismatch_called_by_the_module_it_names() -> None:
    log = LAZY.format(module="integrations.peft", inner=f"cannot import name 'HybridCache' from 'peft.utils' ({SITE}/peft/utils/__init__.py)")
    assert verdict(log) == "api_mismatch"
    b = last_boundary(log)
    assert (b.caller, b.callee, b.member) == ("transformers", "peft", "HybridCache"), b


def test_a_lazy_import_wrapper_over_an_undefined_symbol_is_still_an_abi_failure() -> None:
    log = LAZY.format(module="modeling_utils", inner=f"{SITE}/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi")
    assert verdict(log) == "import_abi"


def test_the_wrapper_alone_names_no_class_of_its_own() -> None:
    log = LAZY.format(module="trainer", inner="")
    assert verdict(log) != "import_abi"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("host:101:202 [2] NCCL INFO transport/net.cc:728 -> 3", "nccl_error"),
        ("host:101:202 [2] proxy.cc:1519 NCCL WARN [Proxy Service 2] Failed to execute operation Connect from rank 2, retcode 3", "nccl_error"),
        ("host:101:202 [2] misc/socket.cc:441 NCCL WARN socketFinalizeAccept: wrong type 4 != 3", "nccl_error"),
        ("host:101:202 [6] NCCL INFO Channel 01/0 : 6[6] -> 5[5] via P2P/IPC/read", "inconclusive"),
        ("host:101:202 [6] NCCL INFO misc/socket.cc:561 -> 0", "inconclusive"),
    ],
)
def test_nccl_error_codes_and_failed_warnings_in_any_wrapper(line: str, expected: str) -> None:
    log = "host:101:202 [2] NCCL INFO Connected all trees\n" + line + "\nhost:101:202 [3] NCCL INFO Connected all trees\n"
    assert verdict(log) == expected


@pytest.mark.parametrize(("count", "expected"), [(1, "oom"), (12, "oom"), (0, "inconclusive")])
def test_the_raylets_count_of_workers_killed_for_memory(count: int, expected: str) -> None:
    log = (
        f"(raylet) [2025-04-02 15:02:00,117 E 1 1] (raylet) node_manager.cc:3069: {count} Workers (tasks / actors) killed due to "
        "memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 35, IP: 10.0.0.1) over the last time period.\n"
    )
    assert verdict(log) == expected


def test_an_ipython_frame_under_home_in_remote_code_names_the_model_repository() -> None:
    log = """~/.cache/huggingface/modules/transformers_modules/acme/Vision-7B/0123456789abcdef0123456789abcdef01234567/modeling_vision.py in generate(self, ids)
    311             embeds = self.embed(ids)
--> 312             n = cache.get_max_length()

AttributeError: 'DynamicCache' object has no attribute 'get_max_length'
"""
    b = last_boundary(log)
    assert (b.caller, b.callee, b.project) == ("user", "transformers", "Vision-7B"), b


@pytest.mark.parametrize(
    ("path", "project"),
    [
        ("/root/.cache/huggingface/modules/transformers_modules/Qwen-7B/modeling_qwen.py", "Qwen-7B"),
        ("/root/.cache/huggingface/modules/transformers_modules/org/Model-2B/0123456789abcdef0123456789abcdef01234567/m.py", "Model-2B"),
    ],
)
def test_remote_code_is_named_by_its_model_repository(path: str, project: str) -> None:
    assert project_of(path) == project


def test_an_exception_line_alone_names_the_program_that_ran_as_the_caller_and_says_so() -> None:
    b = last_boundary("TypeError: LlamaForCausalLM.__init__() got an unexpected keyword argument 'peft_config'\n")
    assert (b.caller, b.callee) == ("user", "transformers"), b
    assert "no frame is printed at all" in b.caller_reason, b


def test_frames_cut_above_a_librarys_own_leave_the_caller_unnamed() -> None:
    log = """  File "/usr/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py", line 12, in __init__
    super().__init__(config)
TypeError: LlamaForCausalLM.__init__() got an unexpected keyword argument 'peft_config'
"""
    b = last_boundary(log)
    assert (b.caller, b.callee) == ("", "transformers"), b


def test_a_lazy_import_wrapper_over_a_missing_attribute_is_that_mismatch_its_asker_unnamed() -> None:
    log = LAZY.format(module="trainer", inner="module 'torch.library' has no attribute 'register_fake'")
    assert verdict(log) == "api_mismatch"
    b = last_boundary(log)
    assert (b.caller, b.callee, b.member) == ("", "torch", "register_fake"), b
    assert "transformers.trainer was imported" in b.caller_reason


def test_a_circular_import_under_the_wrapper_is_no_mismatch() -> None:
    log = LAZY.format(module="trainer", inner="partially initialized module 'torchvision' has no attribute 'extension' (most likely due to a circular import)")
    assert verdict(log) != "api_mismatch"
