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
