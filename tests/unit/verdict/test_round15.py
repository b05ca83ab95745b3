"""Issue 41, twenty-eighth round: an installed package's import names the distribution it imports from even where the
name index does not know it; a package importing its own folder that is no package is not installed whole; gym's
five-value step; build failures; capability refusals, NaN and garbled output in more words; pip's old resolver wording;
CUDA's long messages quoted without a wrapper; a known library run from its own checkout. Each log is written for its
mechanism; none is a held-out log."""

from __future__ import annotations

from verdicts import crossed, sides, verdict

from envmatrix.facts import errorcodes
from envmatrix.verdict.boundary import project_of
from envmatrix.verdict.logscan import scan_text
from envmatrix.verdict.remedies import of_mismatch

SITE = "/usr/local/lib/python3.10/site-packages"


def _import_trace(importer: str, statement: str, error: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    import torchrl\n"
        f'  File "{importer}", line 17, in <module>\n'
        f"    {statement}\n"
        f"{error}\n"
    )


def test_an_installed_packages_import_from_a_module_the_index_does_not_know_names_that_modules_distribution() -> None:
    log = _import_trace(
        f"{SITE}/torchrl/envs/transforms/transforms.py",
        "from acmelib.nn.common import _helper",
        "ImportError: cannot import name '_helper' from 'acmelib.nn.common'",
    )
    assert verdict(log) == "api_mismatch"
    caller, callee, _ = sides(log)
    assert (caller, callee) == ("torchrl", "acmelib")
    # imported by the user's own code, the same module may be the user's: no distribution is named
    own = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n    from acmelib.nn.common import _helper\n'
    assert verdict(own + "ImportError: cannot import name '_helper' from 'acmelib.nn.common'\n") == "missing_module"


def test_a_package_importing_from_its_own_folder_that_is_no_package_is_not_installed_whole() -> None:
    log = _import_trace(
        "/opt/apex/apex/transformer/log_util.py",
        "from apex import _library_root_logger",
        "ImportError: cannot import name '_library_root_logger' from 'apex' (unknown location)",
    )
    assert verdict(log) == "missing_module"
    # another package importing that folder is still the namespace mismatch
    other = _import_trace(
        f"{SITE}/accelerate/utils/megatron_lm.py",
        "from megatron import get_args",
        "ImportError: cannot import name 'get_args' from 'megatron' (unknown location)",
    )
    assert verdict(other) == "api_mismatch"


def test_gyms_five_value_step_unpacked_as_four_is_the_gym_api_change() -> None:
    log = "    observation, reward, done, info = env.step(action)\nValueError: too many values to unpack (expected 4)\n"
    assert verdict(log) == "api_mismatch"
    assert verdict("    obs, info = self.env.reset(seed=0)\nValueError: too many values to unpack (expected 2)\n") == "api_mismatch"
    # an unpacking that is not an environment's step stays a plain error
    assert verdict("    a, b = load_pair(path)\nValueError: too many values to unpack (expected 2)\n") == "error"


def test_a_failed_build_is_an_error_not_inconclusive() -> None:
    log = (
        "      The detected CUDA version (11.8) mismatches the version that was used to compile\n"
        "      PyTorch (12.4). Please make sure to use the same CUDA versions.\n"
        "  ERROR: Failed building wheel for xformers\n"
    )
    assert verdict(log) == "error"
    assert verdict("ERROR: Failed to build installable wheels for some pyproject.toml based projects (flash-attn)\n") == "error"


def test_capability_refusals_in_any_features_words() -> None:
    assert verdict("f8e4m3nv is only supported on compute capability >= 90\n") == "unsupported_gpu"
    assert verdict("ERROR: FP8 models require a GPU with Compute Capability 8.9 or higher (e.g., RTX 4090).\n") == "unsupported_gpu"
    assert verdict("Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support float64.\n") == "unsupported_gpu"


def test_nan_told_in_more_words() -> None:
    assert verdict("the step loss always equals nan when I use the bdd dataset\n") == "nan_loss"
    assert verdict("fine-tuning was impossible because of nan gradients in Lora Adapters\n") == "nan_loss"
    assert verdict("`tensor(nan, device='cuda:1', dtype=torch.float16, grad_fn=<NllLossBackward0>)`\n") == "nan_loss"
    # a tensor without a loss's backward is no loss
    assert verdict("tensor(nan, device='cuda:0', grad_fn=<AddBackward0>)\n") == "inconclusive"


def test_output_told_as_exclamation_marks_in_chinese_is_garbled() -> None:
    assert verdict("加载模型后有时候会输出一堆感叹号\n") == "garbled_output"


def test_a_library_saying_another_must_be_installed_is_a_missing_module() -> None:
    assert verdict("ImportError: Using `has_transformer_engine_layers` requires transformer_engine to be installed.\n") == "missing_module"


def test_pips_old_resolver_wording_names_both_sides() -> None:
    log = "ERROR: transformers 4.0.1 has requirement tokenizers==0.9.4, but you'll have tokenizers 0.10.3 which is incompatible.\n"
    assert verdict(log) == "api_mismatch"
    found = of_mismatch(scan_text(log.encode()))  # no exception: the range pip states is the boundary
    assert found is not None and (found.caller, found.callee) == ("transformers", "tokenizers")


def test_an_import_time_check_printing_its_bounds_as_lists() -> None:
    log = "AssertionError: MMCV==1.3.5 is used but incompatible. Please install mmcv>=[1, 3, 7], <=[1, 4, 0].\n"
    assert verdict(log) == "api_mismatch"
    assert crossed(log).callee == "mmcv"


def test_cudas_long_messages_quoted_without_a_wrapper() -> None:
    log = "it occurs CUDA error in memtorch\\cu\\tile_matmul_kernels.cu(183): an illegal memory access was encountered\n"
    assert verdict(log) == "crash"
    assert verdict('Bug: "an illegal memory access was encountered" during repeated kernel launches.\n') == "crash"
    assert [c.name for c in errorcodes.find("an illegal memory access was encountered")] == ["cudaErrorIllegalAddress"]
    # a short message alone names no code (`out of memory` is any library's); NCCL's report of a CUDA call that failed
    # names CUDA's code (whether it is the cause is the log's order: test_round16)
    assert errorcodes.find("we ran out of memory") == []
    found = errorcodes.find("init.cu:194 NCCL WARN Cuda failure 'an illegal memory access was encountered'")
    assert [c.name for c in found] == ["cudaErrorIllegalAddress"]


def test_a_known_library_run_from_its_own_checkout_is_that_library() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/workspace/AutoGPTQ/auto_gptq/modeling/_utils.py", line 209, in pack_model\n'
        "    qlayers[name].pack(layers[name], scale, zero, g_idx)\n"
        "AttributeError: 'QuantLinear' object has no attribute 'pack'\n"
    )
    assert sides(log)[0] == "auto-gptq"
    # a user's folder named like a package it is not stays the user's
    mine = log.replace("/workspace/AutoGPTQ/auto_gptq/", "/workspace/myproj/myproj/")
    assert sides(mine)[0] != "myproj"


def test_a_model_type_whose_backticks_a_page_dropped_is_still_an_unknown_model() -> None:
    log = "Error: The checkpoint you are trying to load has model type gpt_oss but Transformers does not recognize this architecture.\n"
    assert verdict(log) == "unknown_model"


def test_more_words_of_known_failures() -> None:
    assert verdict("this error indicates that your module has parameters that were not used in producing loss\n") == "grad_lost"
    assert verdict("CollectFeatureDistribution: 100.00 %\n浮点数例外 (核心已转储)\n") == "sigfpe"
    assert verdict("undefined sym：_ZN6caffe28TypeMeta21_typeMetaDataInstanceISt7complexIdEEEPKNS_6detail12TypeMetaDataEv\n") == "import_abi"


def test_a_mounted_folder_names_no_project() -> None:
    assert project_of("/workspace/examples/datapipe.py") == ""
    assert project_of("/home/me/open-r1/src/open_r1/grpo.py") == "open-r1"


def test_a_use_the_installed_release_refuses_in_its_own_words_is_a_mismatch_with_it() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "build.py", line 3, in <module>\n'
        "    from torch.utils.ffi import create_extension\n"
        f'  File "{SITE}/torch/utils/ffi/__init__.py", line 1, in <module>\n'
        '    raise ImportError("torch.utils.ffi is deprecated. Please use cpp extensions instead.")\n'
        "ImportError: torch.utils.ffi is deprecated. Please use cpp extensions instead.\n"
    )
    assert verdict(log) == "api_mismatch"
    found = crossed(log)
    assert (found.kind, found.caller, found.callee) == ("dropped", "user", "torch")
    assert verdict("RuntimeError: Integer division of tensors using div or / is no longer supported, and in a future release\n") == "api_mismatch"
    # the same words in a warning are no failure
    assert verdict("UserWarning: torch.utils._pytree._register_pytree_node is deprecated. Please use register_pytree_node\n") != "api_mismatch"


def test_failures_of_the_scheduler_the_installer_and_the_linker() -> None:
    assert verdict("sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some limit)\n") == "error"
    assert verdict("ERROR: Could not find a version that satisfies the requirement flashinfer-python (from versions: none)\n") == "error"
    assert verdict("/usr/bin/ld: cannot find -lnvinfer\ncollect2: error: ld returned 1 exit status\n") == "missing_module"


def test_nan_told_after_a_value() -> None:
    assert verdict("- `grad_norm` at that point is 3.3 million, then NaN.\n") == "nan_loss"
    assert verdict("But I face a problem of Nan error. The backbone is BERT.\n") == "nan_loss"


def test_a_packages_build_written_version_module_missing_is_an_install_not_built() -> None:
    assert verdict("ModuleNotFoundError: No module named 'vllm._version'\n") == "missing_module"


def test_an_installed_packages_import_from_the_standard_library_is_pythons() -> None:
    log = _import_trace(
        f"{SITE}/colossalai/nn/layer/dropout.py",
        "from contextlib import nullcontext",
        "ImportError: cannot import name 'nullcontext'",
    )
    assert sides(log)[:2] == ("colossalai", "python")
    # a module an installed package loads at run time and asks for a member is no distribution it imports
    asked = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/unsloth/models/rl.py", line 812, in _patch_trl_rl_trainers\n'
        "    trainer = getattr(created_module, f'Unsloth{trainer_name}')\n"
        "AttributeError: module 'UnslothIterativeSFTTrainer' has no attribute 'UnslothIterativeSFTTrainer'\n"
    )
    assert crossed(asked).callee != "unslothiterativesfttrainer"


def test_garbled_output_told_with_words_between() -> None:
    assert verdict("the model runs at normal speed, but output tokens are completely garbled.\n") == "garbled_output"
    assert verdict("However, the output generated is nonsensical and consists only of repetitive characters\n") == "garbled_output"
    assert verdict("because every response was corrupted.\n") == "garbled_output"


def test_jaxs_outdated_library_block_read_whole_is_a_range() -> None:
    log = "Outdated cuDNN installation found.\nVersion JAX was built against: 8907\nMinimum supported: 9100\nInstalled version: 8907\n"
    assert verdict(log) == "api_mismatch"


def test_an_installed_commands_refused_option_is_its_release_and_a_scripts_is_the_codes_error() -> None:
    log = "usage: vllm serve <model_tag> [options]\nvllm serve: error: unrecognized arguments: --enable-reasoning\n"
    assert verdict(log) == "api_mismatch"
    assert verdict("usage: torchrun [-h]\ntorchrun: error: argument --rdzv-backend: invalid choice: 'x'\n") == "api_mismatch"
    # the user's own script refusing an option is no release at odds, but the run still failed
    assert verdict("usage: train.py [-h] [--lr LR]\ntrain.py: error: unrecognized arguments: --epochs 3\n") == "error"
    assert verdict("usage: mytool [-h]\nerror: argument subcommand: invalid choice: 'finetune_lora'\n") == "error"
