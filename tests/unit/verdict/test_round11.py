"""Issue 41, eleventh to sixteenth rounds: failures in the words of other layers (a shell's bold `Killed`, a CI runner's
job limit, HIP's and THC's codes, a meter's poisoned average, a logger's table, Hydra's shortened error, blank boxes for
generated text, bitsandbytes' native library missing), and the importer or caller where the frames do not show it (a
statement pasted over a frameless import, a lazy wrapper's chained cause, Colab's folded frames, a decorator passing its
arguments on). Each log is written for its mechanism; none is a held-out log."""

from __future__ import annotations

import pytest
from verdicts import sides, verdict

SITE = "/usr/local/lib/python3.10/site-packages"


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("epoch 3 step 120 loss 0.41\n\n**Killed**\n", "crash"),
        ("Process finished with exit code 137 (interrupted by signal 9:SIGKILL)\n", "crash"),
        ("Error: The job running on runner Hosted Agent has exceeded the maximum execution time of 360 minutes.\n", "timeout"),
        ("ERROR: Job failed: execution took longer than 3h0m0s seconds\n", "timeout"),
        ("E rocm_driver.cc:606] failed to allocate 2.00GiB (2147483648 bytes) from device: HIP_ERROR_OutOfMemory\n", "oom"),
        ("THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=405 error=4 : unspecified launch failure\n", "crash"),
        ("Epoch: [3]  [100/500]  loss: 2.1 (2.3)  grad_norm: 0.8312 (nan)  time: 0.41\n", "nan_loss"),
        ("| lr        | 1e-4  |\n| loss      | nan   |\n| step      | 2000  |\n", "nan_loss"),
        (
            "Key 'foo' not in 'TrainConfig'\n\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n",
            "error",
        ),
        ("prompt: 'The capital of France is'\n\nThe capital of France is" + "\u25a1" * 30 + "\n", "garbled_output"),
        ("!!! Exception during processing !!! 'NoneType' object has no attribute 'cquantize_blockwise_fp16_nf4'\n", "import_abi"),
        ("'CUDASetup' object has no attribute 'cuda_available'\n", "import_abi"),
        ("KeyError: 'qwen2_moe'\n", "unknown_model"),
        ("No module named 'keras.engine.topology'???\n", "api_mismatch"),
        ("E cuda_diagnostics.cc:312] kernel version 470.182.3 does not match DSO version 520.61.5 -- cannot find working devices\n", "driver_too_old"),
        ("Loaded runtime CuDNN library: 8.0.5 but source was compiled with: 8.1.0.  CuDNN library needs to have matching major version\n", "import_abi"),
        ("Out of memory error on GPU 0. Cannot allocate 1.531250GB memory on GPU 0, available memory is only 416.625000MB.\n", "oom"),
        ("训练时报`MXNetError: cudaMalloc retry failed: out of memory`错误\n", "oom"),
        ("mpirun noticed that process rank 4 with PID 0 on node localhost exited on signal 9 (Killed).\n", "crash"),
        ("In the second epoch, the loss turn up nan\n", "nan_loss"),
        ("0 ||| " + "p412 " * 24 + "||| F0= 0.1\n", "garbled_output"),
        ("CUDA error (/workspace/flash-attention/hopper/flash_fwd_launch_template.h:198): an illegal memory access was encountered\n", "crash"),
        ("Exception raised from ncclCommWatchdog at ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1521 (most recent call first):\n", "nccl_error"),
        ("CQE ERROR wr_id=3 status=12(transport retry counter exceeded) opcode=1 byte_len=0\n", "nccl_error"),
        ("AssertionError: The parameter 666 has already been reduced.\n   Gradient computed twice for this partition.\n", "ddp_ready_twice"),
        (
            "ERROR 04-28 02:37:03 [core.py:398] EngineCore encountered a fatal error.\nERROR 04-28 02:37:03 [core.py:398] Traceback (most recent call last):\n",
            "engine_error",
        ),
        ("ImportError: Apex was not found. Please see the NeMo README for installation instructions\n", "missing_module"),
        ("After launching the model, the response repeated until max tokens\n", "garbled_output"),
        ("#### Error: no module named 'tensorflow.keras'\n", "api_mismatch"),
        (
            "LoweringException: ImportError: cannot import name 'triton_key' from 'triton.compiler.compiler' (/x/site-packages/triton/compiler/compiler.py)\n",
            "api_mismatch",
        ),
    ],
)
def test_a_failure_in_its_own_layers_words(log: str, expected: str) -> None:
    assert verdict(log) == expected, log


def test_words_that_look_alike_stay_healthy_or_unnamed() -> None:
    assert verdict("KeyError: 'my_custom_key'\n") != "unknown_model"  # not a model type transformers knows
    assert verdict("| loss      | 0.31  |\n| grad_norm | 1.2   |\n") != "nan_loss"
    assert verdict("==========================================\n" * 2) == "inconclusive"  # a run of one symbol is no text


def test_a_type_that_is_only_a_word_yields_to_the_exception_after_it() -> None:
    log = "Error: ModuleNotFoundError: No module named 'huggingface_hub.utils._errors'\n"
    assert verdict(log) == "api_mismatch"


def test_the_statement_pasted_over_a_frameless_import_names_its_importer() -> None:
    log = "from datadreamer.llms import HFTransformers\n\nModuleNotFoundError: No module named 'huggingface_hub.utils._errors'\n"
    caller, callee, why = sides(log)
    assert (caller, callee) == ("datadreamer", "huggingface-hub"), why
    own = "from huggingface_hub.utils._errors import HfHubHTTPError\nModuleNotFoundError: No module named 'huggingface_hub.utils._errors'\n"
    assert sides(own)[0] != "huggingface-hub"  # the statement imports the callee itself: no other importer


def test_a_lazy_wrappers_cause_after_a_blank_line_states_the_range() -> None:
    log = (
        "RuntimeError: Failed to import transformers.models.llama.tokenization_llama_fast because of the following error"
        " (look up to see its traceback):\n\ntokenizers>=0.13.3 is required for a normal functioning of this module, but"
        " found tokenizers==0.13.2.\n"
    )
    assert verdict(log) == "api_mismatch"
    assert sides(log)[:2] == ("transformers", "tokenizers")


def test_an_import_error_that_caused_a_lazy_wrappers_failure_was_imported_by_the_wrappers_package() -> None:
    log = (
        f"ImportError: cannot import name 'clear_device_cache' from 'accelerate.utils.memory' ({SITE}/accelerate/utils/memory.py)\n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/diffusers/utils/import_utils.py", line 920, in _get_module\n'
        '    return importlib.import_module("." + module_name, self.__name__)\n'
    )
    assert sides(log)[:2] == ("diffusers", "accelerate")


def test_colabs_folded_frames_hide_the_asker_under_the_cells_call() -> None:
    def cell(call: str) -> str:
        return (
            "AttributeError                            Traceback (most recent call last)\n"
            "[<ipython-input-11-30f3e82a4451>](https://localhost:8080/#) in <cell line: 2>()\n"
            f"----> 2 out = {call}\n\n8 frames\n"
            f"[{SITE}/torch/nn/modules/module.py](https://localhost:8080/#) in __getattr__(self, name)\n"
            "-> 1695         raise AttributeError(f\"'{type(self).__name__}' object has no attribute '{name}'\")\n\n"
            "AttributeError: 'Linear4bit' object has no attribute 'compute_dtype'\n"
        )

    assert sides(cell("get_peft_model(model, config)"))[:2] == ("peft", "bitsandbytes")
    assert sides(cell("train()"))[0] == ""  # a one-word name is no package's fingerprint: the asker stays unnamed
    assert sides(cell("model.compute_dtype"))[0] == "your code"  # the cell's own line asks for it


def test_a_decorator_passing_its_arguments_on_is_the_callees_side() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/proj/train.py", line 117, in main\n'
        "    trainer = Trainer(use_distributed_sampler=False)\n"
        f'  File "{SITE}/pytorch_lightning/utilities/argparse.py", line 348, in insert_env_defaults\n'
        "    return fn(self, **kwargs)\n"
        "TypeError: Trainer.__init__() got an unexpected keyword argument 'use_distributed_sampler'\n"
    )
    caller, callee, _ = sides(log)
    assert (caller, callee) == ("proj (your code)", "pytorch-lightning")


def test_distutils_is_setuptools_and_a_private_module_is_a_release_boundary() -> None:
    log = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/torch/utils/tensorboard/__init__.py", line 4, in <module>\n'
        "    LooseVersion = distutils.version.LooseVersion\n"
        "AttributeError: module 'distutils' has no attribute 'version'\n"
    )
    assert sides(log)[:2] == ("torch", "setuptools")
    private = "from torch._six import container_abcs\nImportError: cannot import name 'container_abcs'\n"
    assert verdict(private) == "api_mismatch"


def test_a_worker_death_naming_no_signal_is_the_consequence_of_an_nccl_failure() -> None:
    died = "(raylet) A worker died or was killed while executing a task by an unexpected system error.\n"
    nccl = "[rank1]:[E1224 13:23:05.483840160 ProcessGroupNCCL.cpp:542] [Rank 12] Collective WorkNCCL(SeqNum=1) raised an async exception\n"
    assert verdict(died + nccl) == "nccl_error"
    assert verdict(died.replace("unexpected system error", "SIGSEGV") + nccl) == "crash"  # a signal of its own: its own cause


def test_range_statements_in_optimums_and_jaxs_words_name_both_sides() -> None:
    optimum = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/optimum/utils/import_utils.py", line 116, in is_auto_gptq_available\n'
        "    raise ImportError(\n"
        "ImportError: Found an incompatible version of auto-gptq. Found version 0.4.2, but only version above 0.4.99 are supported\n"
    )
    assert sides(optimum)[:2] == ("optimum", "auto-gptq")
    jax = "RuntimeError: jaxlib version 0.4.14 is newer than and incompatible with jax version 0.4.6. Please update your jax and/or jaxlib packages.\n"
    assert sides(jax)[:2] == ("jax", "jaxlib")


def test_generates_refused_model_kwargs_and_a_moved_name_are_mismatches_with_their_package() -> None:
    kwargs = "ValueError: The following `model_kwargs` are not used by the model: ['past'] (note: typos in the generate arguments)\n"
    assert sides(kwargs)[1] == "transformers"
    moved = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/fastchat/serve/api.py", line 3, in <module>\n'
        "    from pydantic import BaseSettings\n"
        f'  File "{SITE}/pydantic/__init__.py", line 374, in __getattr__\n'
        "    return _getattr_migration(attr_name)\n"
        "pydantic.errors.PydanticImportError: `BaseSettings` has been moved to the `pydantic-settings` package.\n"
    )
    assert sides(moved)[:2] == ("fschat", "pydantic")


def test_a_class_whose_name_spells_a_package_is_that_packages() -> None:
    log = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/accelerate/optimizer.py", line 77, in defaults\n'
        "    return self.optimizer.defaults\n"
        "AttributeError: 'FP16_DeepSpeedZeroOptimizer' object has no attribute 'defaults'\n"
    )
    assert sides(log)[:2] == ("accelerate", "deepspeed")
