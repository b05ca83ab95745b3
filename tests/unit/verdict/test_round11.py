"""Issue 41, eleventh and twelfth rounds: failures in the words of other layers (a shell's bold `Killed`, a CI runner's
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
