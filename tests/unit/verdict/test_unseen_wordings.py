"""Issue 41, ninth round: the mechanisms the 23rd to 25th held-out sets' misses showed (their README's "Scored"). Each
log here is written for its mechanism (none is a held-out log): who of the stated packages imports the failing name, an
import statement over the ImportError that names no `from`, a lazy-import wrapper's cause on its own line, exceptions
inside sentences, quotes and markup, two more range wordings, the scheduler's and sanitizer's own words, fp16 loss
scaling giving up in fairseq's words, and members that are no API."""

from __future__ import annotations

import ast

import pytest
from verdicts import last_boundary as boundary
from verdicts import sides, verdict

from envmatrix.facts import nameindex
from envmatrix.facts.nameindex_build import read_uses
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text

SITE = "/opt/conda/lib/python3.10/site-packages"


# who of the stated packages imports the name


def test_the_builder_reads_what_a_module_takes_from_others() -> None:
    tree = ast.parse("import torch.nn as nn\nfrom transformers.cache_utils import HybridCache\nx = nn.functional.gelu\n")
    assert {"torch.nn:functional", "torch.nn.functional:gelu", "transformers.cache_utils:HybridCache", "transformers.cache_utils"} <= read_uses(tree)


def test_the_index_knows_which_packages_import_a_name_a_release_removed() -> None:
    assert nameindex.users("transformers", "HybridCache") == ("peft",)
    assert nameindex.users("transformers", "AutoModelForCausalLM") == ()  # everyone imports it: too many to tell apart


def test_of_the_packages_a_log_lists_the_one_whose_code_imports_the_name_called() -> None:
    failed = "ImportError: cannot import name 'HybridCache' from 'transformers'\n"
    listed = "trl==0.19.1\npeft==0.13.2\ntransformers==5.0.0\n\n"
    who, callee, why = sides(listed + failed)
    assert (who, callee) == ("peft", "transformers"), why
    assert "peft's own code imports HybridCache" in why
    assert sides(failed)[0] == "your code"  # never from the index alone: the world's code is larger than the releases indexed


def test_an_import_statement_printed_above_names_the_module_of_a_bare_name() -> None:
    log = "from transformers.generation import DisjunctiveConstraint\nImportError: cannot import name 'DisjunctiveConstraint'\n"
    assert verdict(log) == "api_mismatch"
    assert (boundary(log).name, boundary(log).callee) == ("transformers.generation", "transformers")


# exceptions inside other text


def test_the_cause_a_lazy_wrapper_prints_on_its_own_line_is_that_import_called_by_the_module_it_names() -> None:
    log = (
        "RuntimeError: Failed to import trl.trainer.grpo_trainer because of the following error (look up to see its traceback): "
        "cannot import name 'is_deepspeed_zero3_enabled' from 'transformers.integrations'\n"
    )
    assert verdict(log) == "api_mismatch"
    assert sides(log)[:2] == ("trl", "transformers")


@pytest.mark.parametrize(
    "line",
    [
        "error: AttributeError: module 'torch' has no attribute 'compiler'",  # a label that parses as an exception type
        "After the upgrade I get `ModuleNotFoundError(\"No module named 'transformers.models.qwen3'\")`",  # a repr, quoted
        "running train.py errors out with `ModuleNotFoundError: No module named 'transformers.models.qwen3'`",
        "**ModuleNotFoundError: No module named 'transformers.models.qwen3'**_",  # markdown around it
        "Cannot import /srv/app/custom_nodes/Upscaler module for custom nodes: module 'torch.amp' has no attribute 'custom_fwd'",
        "No module named 'torchao.quantization.prototype'",  # alone, without its type
    ],
)
def test_an_api_message_inside_a_sentence_quote_or_markup_is_read(line: str) -> None:
    assert verdict(line + "\n") == "api_mismatch"


def test_a_warning_that_goes_on_after_a_missing_module_is_no_exception() -> None:
    log = "WARNING: No module named 'triton'; using the slow path\n" + "".join(f"{{'loss': 0.5, 'grad_norm': {i}.5}}\n" for i in range(1, 5))
    assert classify(RunFacts(scan=scan_text(log.encode()), exit_code=0)).outcome.value == "ok"


# ranges in two more wordings


def test_a_package_naming_the_release_it_found_and_the_range_to_install_is_a_range() -> None:
    log = "AssertionError: MMCV==1.3.0 is used but incompatible. Please install mmcv>=1.3.8, <=1.4.0.\n"
    assert verdict(log) == "api_mismatch"
    assert (boundary(log).callee, boundary(log).member) == ("mmcv", ">=1.3.8,<=1.4.0")


def test_a_package_checking_its_companion_is_the_caller_of_that_range() -> None:
    log = "ValueError: jaxlib is version 0.4.1, but this version of jax requires version 0.4.7.\n"
    assert verdict(log) == "api_mismatch"
    assert (boundary(log).caller, boundary(log).callee, boundary(log).member) == ("jax", "jaxlib", ">=0.4.7")


# failures that are not Python exceptions, in more words


@pytest.mark.parametrize(
    ("log", "outcome"),
    [
        ("PBS Job Id: 1.sched\nAborted by PBS Server\nJob exceeded its walltime limit. Job was aborted\n", "timeout"),
        ("job deleted\nMOAB_INFO:  job exceeded wallclock limit\n", "timeout"),
        ("DefaultCPUAllocator: not enough memory\n", "oom"),
        ("slurmstepd: error: Detected 2 oom_kill events in StepId=77.0. Some of the step tasks have been OOM Killed.\n", "oom"),
        ("srun: error: gpu-7: task 1: Out Of Memory\n", "oom"),
        ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n", "oom"),
        ("Process finished with exit code 139 (interrupted by signal 11: SIGSEGV)\n", "crash"),
        ("Process finished with exit code 136 (interrupted by signal 8: SIGFPE)\n", "sigfpe"),
        ("Loading checkpoint shards:   0%|          | 0/4 [00:00<?, ?it/s]\nkilled\n", "crash"),
        ("RuntimeError: Direct module loading failed for UnslothDPOTrainer: invalid syntax (UnslothDPOTrainer.py, line 88)\n", "api_mismatch"),
        ("RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.1.1.2]:3000\n", "nccl_error"),
        (
            "[E ProcessGroupGloo.cpp:144] Rank 2 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0.\n",
            "nccl_error",
        ),
        ("E local_client.cc:672] Execution of replica 0 failed: Resource exhausted: Out \nof memory while trying to allocate 512 bytes.\n", "oom"),
        ("==1==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000010 (pc 0x1 bp 0x2 sp 0x3 T0)\n", "crash"),
        ("".join(f"| WARNING: overflow detected, setting loss scale to: {0.5**k}\n" for k in range(1, 14)), "nan_loss"),
        (
            "Unrecognized configuration class <class 'transformers_modules.m.configuration_m.MConfig'> for this kind of AutoModel: AutoModelForCausalLM.\n",
            "unknown_model",
        ),
        ("NameError: name 'deepspeed' is not defined\n", "missing_module"),
        ("A module that was compiled using NumPy 1.x cannot be run in\nNumPy 2.1.3 as it may crash.\n", "import_abi"),
        ("RuntimeError: Detected that PyTorch and torchvision were compiled with different CUDA major versions.\n", "import_abi"),
        ("RuntimeError: operator torchvision::roi_align does not exist\n", "import_abi"),
        ("ValueError: Model architectures ['Gemma3ForCausalLM'] are not supported for now. Supported architectures: ['TuringLM']\n", "unknown_model"),
        ("triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456, Hardware limit: 101376.\n", "unsupported_gpu"),
        (
            "ValueError: numpy.dtype size changed, may indicate binary incompatibility. Expected 96 from C header, got 88 from PyObject\n",
            "import_abi",
        ),  # a guarded `import deepspeed` that did not run
        ("TypeError: Descriptors cannot be created directly.\nIf this call came from a _pb2.py file, your generated code is out of date\n", "api_mismatch"),
    ],
)
def test_more_failures_are_read_in_their_own_words(log: str, outcome: str) -> None:
    assert verdict(log) == outcome


# members and modules that are no API


def test_a_member_that_is_no_python_name_is_no_api() -> None:
    log = "AttributeError: 'Qwen2ForCausalLM' object has no attribute 'model.embed_tokens.weight'\n"
    assert verdict(log) != "api_mismatch"
    assert verdict("AttributeError: 'Qwen2RotaryEmbedding' object has no attribute ' inv_freq'\n") == "api_mismatch"  # a stray space


def test_a_packages_compiled_extension_missing_is_a_broken_install() -> None:
    assert verdict("ModuleNotFoundError: No module named 'mmcv._ext'\n") == "missing_module"
    assert verdict("ModuleNotFoundError: No module named 'torch._six'\n") == "api_mismatch"  # a pure-Python module a release removed


def test_a_library_asking_its_own_class_in_its_own_frames_is_its_own_failure() -> None:
    log = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/ray/_private/worker.py", line 10, in get\n'
        "    worker.core_worker.get_objects(ids)\n"
        "AttributeError: 'Worker' object has no attribute 'core_worker'\n"
    )
    assert verdict(log) != "api_mismatch"
    assert boundary(log).callee == "ray"


def test_a_removed_name_belongs_to_the_package_its_message_spells() -> None:
    log = "AttributeError: `np.int` was removed in the NumPy 1.24 release. Use `int` instead.\n"
    assert verdict(log) == "api_mismatch"
    assert (boundary(log).callee, boundary(log).member) == ("numpy", "int")
    prose = "AttributeError: `torch.library.impl_abstract` was removed in PyTorch 2.9.\n"  # as prose spells it
    assert (boundary(prose).callee, boundary(prose).member) == ("torch", "impl_abstract")


def test_a_stack_package_inside_another_packages_checkout_is_its_subpackage() -> None:
    def caller(path: str) -> str:
        log = f'Traceback (most recent call last):\n  File "{path}", line 9, in patch\n    from trl import create_reference_model\n'
        return boundary(log + "ImportError: cannot import name 'create_reference_model' from 'trl'\n").caller

    assert caller("/home/team/OpenRLHF/openrlhf/models/transformers/patch.py") == "openrlhf"
    assert caller("/workspace/transformers/src/transformers/integrations/patch.py") == "transformers"  # a checkout's `src/`


def test_garbled_output_told_only_in_words_decides_where_nothing_else_does() -> None:
    assert verdict("After upgrading vllm the model's answers are gibberish.\nChat response: 的背后 మ xin\n") == "garbled_output"
    assert verdict("模型输出乱码\n") == "garbled_output"
    said = "The replies were gibberish, then:\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert verdict(said) == "oom"  # a failure the log prints decides
    assert verdict("My terminal renders the log garbled.\n") == "inconclusive"  # the words are about the model's output
