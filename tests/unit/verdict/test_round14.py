"""Issue 41, twenty-third round: a message wrapped before the name it gives; a NameError whose suggestion is the same
package's other spelling; a method printed without its class; a relative IPython path inside the environment; tuple
bounds in an import-time range check; diffusers in the name index without the remote code it vendors; a shell's and a
kernel's words for a crash and a refused GPU; the user's words for an output made of one mark, a loss going NaN and a
zero gradient in Chinese. Each log is written for its mechanism; none is a held-out log."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from verdicts import crossed, sides, verdict

from envmatrix.facts.nameindex import resolve
from envmatrix.facts.nameindex_build import Distribution, read_archive

SITE = "/usr/local/lib/python3.10/site-packages"


def test_a_message_wrapped_before_its_keyword_still_names_the_callee() -> None:
    log = "TypeError: SFTConfig.__init__() got an unexpected keyword argument\n'max_seq_length'. Did you mean 'max_length'?\n"
    found = crossed(log)
    assert (found.callee, found.member) == ("trl", "max_seq_length")
    # a first line that gives its name is not joined to the next
    assert crossed("TypeError: SFTConfig.__init__() got an unexpected keyword argument 'x'\n'y'\n").member == "x"


def test_a_name_error_suggesting_the_same_packages_other_spelling_is_a_renamed_class() -> None:
    log = "unsloth 2025.9.9, transformers 5.0.0rc1\nNameError: name 'PreTrainedConfig' is not defined. Did you mean: 'PretrainedConfig'?\n"
    assert verdict(log) == "api_mismatch"
    assert crossed(log).callee == "transformers"
    # without the suggestion the package's guarded import did not run: it is missing
    assert verdict("NameError: name 'PreTrainedConfig' is not defined\n") == "missing_module"
    # a suggestion of an unrelated local name says nothing of the package
    assert verdict("NameError: name 'PreTrainedConfig' is not defined. Did you mean: 'my_config'?\n") == "missing_module"


def test_a_method_printed_without_its_class_is_the_shown_package_whose_classes_have_it() -> None:
    log = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/sentence_transformers/models/Transformer.py", line 77, in get_sentence_features\n'
        "    return self.tokenizer.prepare_for_model(tokens, padding=True)\n"
        "TypeError: prepare_for_model() got an unexpected keyword argument 'padding'\n"
        "transformers 3.0.2\n"
    )
    caller, callee, why = sides(log)
    assert (caller, callee) == ("sentence-transformers", "transformers"), why


def test_a_method_call_is_not_a_module_function_of_a_package_the_log_does_not_show() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "tutorial4.py", line 70, in <module>\n'
        "    df['emb'] = retriever.create_embedding(texts=questions)\n"
        "TypeError: create_embedding() got an unexpected keyword argument 'texts'\n"
    )
    assert sides(log)[1] != "vllm"


def test_an_ipython_frame_cut_to_start_inside_the_environment_is_read() -> None:
    log = (
        "lib/python3.8/site-packages/sentence_transformers/models/Transformer.py in get_sentence_features(self, tokens)\n"
        "     76             batch1.append(text_tuple[0])\n"
        "\n"
        "TypeError: prepare_for_model() got an unexpected keyword argument 'padding'\n"
    )
    assert sides(log)[0] == "sentence-transformers"


def test_tuple_bounds_of_an_import_time_check_are_read_as_releases() -> None:
    log = "AssertionError: MMCV==1.3.9 is used but incompatible. Please install mmcv>=(1, 3, 13, 0, 0, 0), <(1, 7, 0, 0, 0, 0).\n"
    assert verdict(log) == "api_mismatch"
    found = crossed(log)
    assert (found.callee, found.member) == ("mmcv", ">=1.3.13,<1.7")


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("fish: Job 1, 'python main.py' terminated by signal SIGILL (Illegal instruction)\n", "crash"),
        ("fish: Job 1, 'python main.py' terminated by signal SIGSEGV (Address boundary error)\n", "crash"),
        ("ERROR: Your GPU does not support Int8 Matmul!\n", "unsupported_gpu"),
        ("My GPU does not support it, I think\n", "inconclusive"),
        ("The student model always generates '!' during rollout.\n", "garbled_output"),
        ("I tried again, the results were still '\\n\\n\\n\\n\\n', vllm works\n", "garbled_output"),
        ("if token == '!': break\n", "inconclusive"),
        ("After the first epoch my training loss is going NaN.\n", "nan_loss"),
        ("经过embedding层之后出现inf，计算loss时候出现nan\n", "nan_loss"),
        ("微调bge_m3，跑了几轮后，grad_norm变为0，这个正常吗\n", "zero_grad"),
        ("grad_norm变为0.5之后稳定\n", "inconclusive"),
        ("ValueError: PEFT backend is required for this method.\n", "missing_module"),
        ("FileNotFoundError: Could not find module 'C:\\m\\quantization_kernels_parallel.so' (or one of its dependencies).\n", "import_abi"),
    ],
)
def test_failures_in_their_own_words(log: str, expected: str) -> None:
    assert verdict(log) == expected


def test_a_library_the_ecosystem_installs_is_the_callee_of_its_modules() -> None:
    assert crossed("AttributeError: module 'dill._dill' has no attribute 'stack'\n").callee == "dill"
    assert verdict("ModuleNotFoundError: No module named 'opencompass.cli.arguments'\n") == "api_mismatch"


def test_the_builder_skips_the_remote_code_a_distribution_vendors(tmp_path: Path) -> None:
    wheel = tmp_path / "diffusers-0.42.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("diffusers/__init__.py", "")
        zf.writestr("diffusers/pipelines/kolors/tokenizer.py", "class ChatGLMTokenizer:\n    pass\n")
        zf.writestr("diffusers/models/unet.py", "class UNet2DConditionModel:\n    pass\n")
    dists: dict[str, Distribution] = {}
    read_archive(wheel, dists)
    assert "UNet2DConditionModel" in dists["diffusers"].names
    assert "ChatGLMTokenizer" not in dists["diffusers"].names
    # the committed index reads diffusers the same way: its own classes, not the vendored ChatGLM code
    assert resolve("UNet2DConditionModel").dist == "diffusers"
    assert "diffusers" not in resolve("ChatGLMTokenizer").candidates


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ('"llama runner process has terminated: %!w(<nil>)"\n', "crash"),
        ('"model requires more system memory (5.3 GiB) than is available (4.4 GiB)"\n', "oom"),
        ("llama.cpp: loading model from m.bin\nerror loading model: unrecognized tensor type 4\nllama_init_from_file: failed to load model\n", "error"),
        (
            "ERROR: This container was built for NVIDIA Driver Release 440.33 or later, but\n"
            "       version 418.87.01 was detected and compatibility mode is UNAVAILABLE.\n",
            "driver_too_old",
        ),
        ("terminate called after throwing an instance of 'dmlc::Error'\n  what():  Check failed: cannot locate symbol CUDARawAlloc\n", "import_abi"),
        ("AttributeError: '_OpNamespace' 'fbgemm' object has no attribute 'jagged_2d_to_dense'\n", "import_abi"),
        ("AttributeError: '_OpNamespace' 'aten' object has no attribute 'foo'\n", "error"),
        ("ModuleNotFoundError: No module named 'tensorrt_llm.bindings'\n", "missing_module"),
        ("NameError: name 'Replicate' is not defined\n", "api_mismatch"),
        ("NameError: name 'torch' is not defined\n", "missing_module"),
        (
            "NotImplementedError: Support for `training_epoch_end` has been removed in v2.0.0. `MocoModel` implements this method.\n",
            "api_mismatch",
        ),
        ("Can't get attribute 'DSC3k2' on module 'ultralytics.nn.modules.block'\n", "api_mismatch"),
        ("AttributeError: Can't get attribute 'Net' on <module '__main__' from 'train.py'>\n", "error"),
    ],
)
def test_failures_printed_their_own_way(log: str, expected: str) -> None:
    assert verdict(log) == expected


def test_a_load_refused_under_weights_only_is_the_callers_reliance_on_the_old_default() -> None:
    log = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/ogb/nodeproppred/dataset_pyg.py", line 69, in __init__\n'
        "    self.data, self.slices = torch.load(self.processed_paths[0])\n"
        f'  File "{SITE}/torch/serialization.py", line 1455, in load\n'
        "    raise pickle.UnpicklingError(_get_wo_message(str(e))) from None\n"
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do so you have two options\n"
    )
    assert verdict(log) == "api_mismatch"
    found = crossed(log)
    assert (found.caller, found.callee, found.kind, found.member) == ("ogb", "torch", "default", "weights_only")


def test_keras_refusing_a_layer_keyword_is_a_mismatch_with_the_package_that_raised() -> None:
    log = (
        '  File "C:\\py\\lib\\site-packages\\tensorflow\\python\\keras\\utils\\generic_utils.py", line 600, in validate_kwargs\n'
        "    raise TypeError(error_message, kwarg)\n"
        "TypeError: ('Keyword argument not understood:', 'dropout_rate')\n"
    )
    assert verdict(log) == "api_mismatch"
    assert (crossed(log).callee, crossed(log).member) == ("tensorflow", "dropout_rate")


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("train.py: error: unrecognized arguments: --local-rank=0\n", "api_mismatch"),
        ("train.py: error: unrecognized arguments: --lr=0.1\n", "error"),  # the script refused its command line: no release at odds
        (
            "[rank2]:[W303 socket.cpp:487] [c10d] waitForInput: socket SocketImpl(fd=71, remote=[localhost]:29500) timed out after 600000ms\n",
            "nccl_error",
        ),
        ("Non-OK-status: GpuLaunchKernel(FillPhiloxRandomKernelLaunch, d.stream(), gen) status: Internal: out of memory\n", "oom"),
        (
            "ImportError: cannot import name 'export_models' from partially initialized module 'optimum.exporters.onnx'"
            " (most likely due to a circular import) (/x/optimum/exporters/onnx/__init__.py)\n",
            "error",
        ),
        ("srun: error: Task launch for 36.0 failed on node cn131: Job credential expired\n", "error"),
        ("ERROR - Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.\n", "crash"),
        ("TypeError: LLMatcher.validate_grammar() got some positional-only arguments passed as keyword arguments: 'tokenizer'\n", "api_mismatch"),
        (
            "ModuleNotFoundError: No module named 'transformers.integrations.deepspeed'; 'transformers.integrations' is not a package\n",
            "api_mismatch",
        ),
        ("ModuleNotFoundError: No module named 'vllm.engine'; 'vllm' is not a package\n", "error"),
        ("llama_model_load: error loading model: error loading model architecture: unknown model architecture: 'qwen3'\n", "unknown_model"),
        (
            "RuntimeError: Orchestrator initialization failed: Dummy run failed: LTX2TextConnectors.forward() got an unexpected"
            " keyword argument 'additive_mask'\n",
            "api_mismatch",
        ),
        ("TypeError: causal_conv1d_fwd(): incompatible function arguments. The following argument types are supported:\n", "api_mismatch"),
    ],
)
def test_failures_of_launchers_wrappers_and_extensions(log: str, expected: str) -> None:
    assert verdict(log) == expected


def test_a_wrapper_quoting_a_keyword_refusal_names_the_called_class() -> None:
    log = "RuntimeError: Dummy run failed: SFTConfig.__init__() got an unexpected keyword argument 'max_seq_length'\n"
    found = crossed(log)
    assert (found.callee, found.member) == ("trl", "max_seq_length")


def test_a_class_several_packages_name_is_the_one_whose_classes_have_the_member() -> None:
    found = crossed("AttributeError: 'Attention' object has no attribute 'cross_attention_norm'\n")
    assert found.callee == "diffusers", found.callee_reason
    # a member none of them has, or several have, names none
    assert crossed("AttributeError: 'Attention' object has no attribute 'zz_not_a_member'\n").callee in ("", None)
