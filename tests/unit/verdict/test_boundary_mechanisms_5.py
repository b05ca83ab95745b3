"""Issue 41, fifth round: what the seventh held-out set's misses taught (heldout-logs-7/README.md, "What happened next").
Each log here is written for its mechanism (none is a held-out log): IPython 8's tracebacks, code a package generates into
the user's folder, nested lazy-import wrappers, a private module a release removed, an example's minimum-version check run
from a checkout, a package Python found no file of, any fatal interpreter error, and an exception pasted above its trace."""

from __future__ import annotations

from envmatrix.verdict.boundary import Boundary, of
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text

SITE = "/usr/local/lib/python3.10/site-packages"


def verdict(log: str) -> str:
    return classify(RunFacts(scan=scan_text(log.encode()))).outcome.value


def last(log: str) -> Boundary:
    found = [b for r in scan_text(log.encode()).raised if (b := of(r)) is not None]
    assert found, log
    return found[-1]


def test_ipython_8_cells_and_files_are_frames() -> None:
    log = f"""---------------------------------------------------------------------------
TypeError                                 Traceback (most recent call last)
Cell In[7], line 3
      1 import x
----> 3 args = Thing(alpha=1)

File {SITE}/accelerate/accelerator.py:120, in Accelerator.__init__(self, *args)
    118 pass
--> 120 Thing(alpha=1)

TypeError: Accelerator.__init__() got an unexpected keyword argument 'alpha'
"""
    (raised,) = scan_text(log.encode()).raised
    assert [(f.package, f.line) for f in raised.frames] == [("", 3), ("accelerate", 120)]
    assert verdict(log) == "api_mismatch"


def test_code_a_package_generates_in_the_users_folder_is_that_packages() -> None:
    log = """File ~/work/unsloth_compiled_cache/UnslothGRPOTrainer.py:5
----> 5 from trl.trainer.grpo_trainer import (GRPOTrainer, NoSuchHelper)

ImportError: cannot import name 'NoSuchHelper' from 'trl.trainer.grpo_trainer'
"""
    b = last(log)
    assert (b.caller, b.callee) == ("unsloth", "trl"), b


def test_nested_lazy_import_wrappers_name_the_innermost_module() -> None:
    log = f"""RuntimeError: Failed to import diffusers.pipelines.x because of the following error (look up to see its traceback):
Failed to import diffusers.loaders.y because of the following error (look up to see its traceback):
cannot import name 'NoSuchProcessor' from 'transformers' ({SITE}/transformers/__init__.py)
"""
    b = last(log)
    assert (b.caller, b.callee) == ("diffusers", "transformers") and "diffusers.loaders.y" in b.caller_reason, b


def test_a_private_module_a_release_removed_is_a_mismatch_a_compiled_one_is_not() -> None:
    removed = f"""Traceback (most recent call last):
  File "{SITE}/deepspeed/runtime/utils.py", line 18, in <module>
    from torch._six import inf
ModuleNotFoundError: No module named 'torch._six'
"""
    assert verdict(removed) == "api_mismatch" and (last(removed).caller, last(removed).callee) == ("deepspeed", "torch")
    assert verdict("ModuleNotFoundError: No module named 'vllm._moe_C'\n") == "missing_module"


def test_an_examples_minimum_version_check_names_the_script_and_the_package() -> None:
    log = f"""Traceback (most recent call last):
  File "/home/me/transformers/examples/pytorch/run_clm.py", line 59, in <module>
    check_min_version("4.99.0.dev0")
  File "{SITE}/transformers/utils/__init__.py", line 251, in check_min_version
    raise ImportError(
ImportError: This example requires a source install from HuggingFace Transformers (see `https://x`), but the version found is 4.39.1.
"""
    assert verdict(log) == "api_mismatch"
    b = last(log)
    assert (b.caller, b.callee, b.member) == ("user", "transformers", ">4.39.1"), b
    minimum = "ImportError: This example requires a minimum version of 0.30.0, but the version found is 0.29.1.\n"
    framed = f'Traceback (most recent call last):\n  File "{SITE}/diffusers/utils/x.py", line 3, in check_min_version\n    raise ImportError(\n{minimum}'
    assert (last(framed).callee, last(framed).member) == ("diffusers", ">=0.30.0")


def test_a_package_python_found_no_file_of_is_not_installed() -> None:
    log = "ImportError: cannot import name 'load_dataset' from 'datasets' (unknown location)\n"
    assert verdict(log) == "missing_module"
    remedy = classify(RunFacts(scan=scan_text(log.encode()))).remedy
    assert "Python found a folder named datasets" in remedy


def test_any_fatal_interpreter_error_is_a_crash() -> None:
    log = "Fatal Python error: none_dealloc: deallocating None\nPython runtime state: initialized\n"
    assert verdict(log) == "crash"


def test_an_exception_pasted_above_its_trace_gets_the_frames() -> None:
    log = """'LLMEngine' object has no attribute 'model_executor'
  File "/home/me/proj/train/online.py", line 270, in _generate
    m = self.llm.llm_engine.model_executor.driver_worker
"""
    b = last(log)
    assert (b.who, b.callee, b.member) == ("proj (your code)", "vllm", "model_executor"), b
    quoted = f"""> AttributeError: 'Qwen2ForCausalLM' object has no attribute 'no_such'
  File "{SITE}/liger_kernel/transformers/monkey_patch.py", line 9, in apply
    m = model.no_such
"""
    assert (last(quoted).caller, last(quoted).callee) == ("liger-kernel", "transformers")


def test_the_first_line_of_an_import_message_decides_and_curly_quotes_are_quotes() -> None:
    fenced = "```\nImportError: cannot import name 'NoSuchParams' from 'vllm.sampling_params'\n```\n"
    assert verdict(fenced) == "api_mismatch"
    curly = "ImportError: cannot import name 'LlamaForCausalLM' from 'transformers’\n"
    assert verdict(curly) == "api_mismatch"


def test_a_label_before_an_exception_line_is_read_through() -> None:
    log = "error info: ModuleNotFoundError: No module named 'transformers.deepspeed'\n"
    assert verdict(log) == "api_mismatch"
    assert verdict("note: this is fine\n") == "inconclusive"


def test_a_package_that_cannot_import_its_own_submodule_is_a_broken_install() -> None:
    log = f"""  File "{SITE}/bitsandbytes/cextension.py", line 5, in <module>
    from .cuda_setup.main import evaluate_cuda_setup
  File "{SITE}/bitsandbytes/cuda_setup/main.py", line 21, in <module>
    from .paths import determine_cuda_runtime_lib_path
ModuleNotFoundError: No module named 'bitsandbytes.cuda_setup.paths'
"""
    assert verdict(log) == "missing_module"


def test_an_egg_folder_is_looked_through_to_its_package() -> None:
    log = f"""Traceback (most recent call last):
  File "{SITE}/transformers-4.49.0.dev0-py3.9.egg/transformers/utils/generic.py", line 477, in <module>
    _torch_pytree.register_pytree_node(
AttributeError: module 'torch.utils._pytree' has no attribute 'register_pytree_node'
"""
    b = last(log)
    assert (b.caller, b.callee) == ("transformers", "torch"), b


def test_the_boundary_comes_from_the_copy_of_an_exception_that_has_frames() -> None:
    from envmatrix.verdict.evidence import strong

    log = f"""ImportError: cannot import name 'no_such_helper' from 'vllm.model_executor.utils'

Traceback (most recent call last):
  File "/w/verl/verl/workers/rollout/vllm_rollout.py", line 54, in <module>
    from vllm.model_executor.utils import no_such_helper
ImportError: cannot import name 'no_such_helper' from 'vllm.model_executor.utils' ({SITE}/vllm/model_executor/utils.py)
"""
    judged = strong(scan_text(log.encode()), "api_mismatch")
    assert judged is not None and judged.raised.frames
    assert (of(judged.raised).caller, of(judged.raised).callee) == ("verl", "vllm")  # type: ignore[union-attr]
