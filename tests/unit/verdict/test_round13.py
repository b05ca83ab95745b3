"""Issue 41, nineteenth round: the class an `__init__()` printed without it was built from, where a decorator passed the
call on (the frame above built it); failures in their own words (DDP's unreduced parameters, a gradient norm always NaN,
an exception named by its module path inside a sentence, the user's words for an OOM or a zero gradient); a link to a
line of a package's source as the caller; the name index's pinned rebuild. Each log is written for its mechanism; none
is a held-out log."""

from __future__ import annotations

import pytest
from verdicts import crossed, sides, verdict

from envmatrix.facts.nameindex_build import pinned

SITE = "/usr/local/lib/python3.10/site-packages"


def test_a_class_built_through_a_decorator_is_named_by_the_frame_above() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/rl/dpo_train.py", line 49, in <module>\n'
        "    dpo_trainer = DPOTrainer(\n"
        f'  File "{SITE}/transformers/utils/deprecation.py", line 165, in wrapped_func\n'
        "    return func(*args, **kwargs)\n"
        "TypeError: __init__() got an unexpected keyword argument 'beta'\n"
    )
    caller, callee, why = sides(log)
    assert (caller, callee) == ("rl (your code)", "trl"), why
    # the frame above calls no class: nothing to name, not a guess from the decorator's package
    assert sides(log.replace("DPOTrainer(", "build(config)"))[1] != "trl"


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (
            "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error"
            " indicates that your module has parameters that were not used in producing loss.\n",
            "grad_lost",
        ),
        ("Training the critic: grad_norm is always nan\n", "nan_loss"),
        ("after 30 steps the loss is still nan\n", "nan_loss"),
        ("around 70K steps I got the following NaN loss:\n76980 nan\n", "nan_loss"),
        ("训练了1w steps后开始频繁出现loss为nan的情况\n", "nan_loss"),
        ("During RL training the KL divergence turned to NaN and the run aborted.\n", "nan_loss"),
        ("On CPU it trains; on mps the result is always nan.\n", "nan_loss"),
        # c10's warning from a destructor names the CUDA fault the kernel left behind
        (
            "Warning: CUDA warning: an illegal memory access was encountered (function destroyEvent)\n"
            "terminate called after throwing an instance of 'c10::CUDAError'\n",
            "crash",
        ),
        # an exception named by its module path inside a sentence, and behind a component's level
        ("有人遇到 triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: 65536 吗\n", "unsupported_gpu"),
        (
            "[16:10:33] worker/ERROR  triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: 65536\n",
            "unsupported_gpu",
        ),
        # only the user's words tell the failure
        ("Full fine-tuning with torchrun on two cards, batch size 1: we hit OOM right away\n", "oom"),
        ("全量微调 Qwen，报 OOM\n", "oom"),
        ("After running the script I am getting 0 loss and 0 grad_norm on every step\n", "zero_grad"),
        # a runtime's loader, vLLM's capability check, an unrecognised model's config without backticks
        ("RuntimeError: Library cublas64_12.dll is not found or cannot be loaded\n", "import_abi"),
        (
            "The quantization method awq is not supported for the current GPU. Minimum capability: 75. Current capability: 70.\n",
            "unsupported_gpu",
        ),
        ("ValueError: Unrecognized model in org/policy. Should have a model_type key in its config.json\n", "unknown_model"),
        # a package's compiled part imported by name was never built; a name that only starts like one is a name
        ("ImportError: cannot import name '_C' from 'detectron2'\n", "missing_module"),
        (f"ImportError: cannot import name '_CONFIG_FOR_DOC' from 'transformers.models.gemma2.modeling_gemma2' ({SITE}/x.py)\n", "api_mismatch"),
        # messages quoted in prose
        ("the script prints the error \"No module named 'torchvision.models.utils'\" at its import\n", "api_mismatch"),
        ("'transformers.models.qwen2_5_vl.modeling_qwen2_5_vl' has no attribute '_flash_attention_forward'\n", "api_mismatch"),
        # a shell prompt after the message is the user's next command, not a line of it
        (
            "RuntimeError: The size of tensor a (32) must match the size of tensor b (64) at non-singleton dimension 3\n"
            "PS C:\\Users\\me\\code> pip install -v gptqmodel --no-build-isolation\n",
            "error",
        ),
        # Windows' loader and ggml's assertion in their own words
        ('[ONNXRuntimeError] : 1 : FAIL : LoadLibrary failed with error 126 "" when trying to load "providers_cuda.dll"\n', "import_abi"),
        ('GGML_ASSERT(n_outputs_enc > 0 && "call llama_encode() first") failed\n', "crash"),
        # garbled output as a tokenizer spaced it, as sentencepiece's unknown pieces, and in the user's words
        ("A blender next to cups." + "! " * 20 + "\n", "garbled_output"),
        ("Hello, my name is " + "⁇  " * 20 + "\n", "garbled_output"),
        ("It generates one sentence and fills the rest tokens with exclamation marks.\n", "garbled_output"),
        ("after several successful runs the server returns only '!'\n", "garbled_output"),
        # an exception written right after Chinese prose, its quote left open
        ("所以报出TypeError: GenerationMixin._extract_past() got an unexpected keyword argument 'standardize_cache_format \n", "api_mismatch"),
        # other accelerators' and runtimes' words: HCCL on Ascend NPUs, c10d's store barrier, ROCm without this GPU's
        # kernels, a ptxas that does not know the GPU, an operator Apple's GPU lacks, xformers on too little shared memory,
        # Intel's XPU allocator, pinned host memory, the loader's static TLS
        ("RuntimeError: [ERROR] HCCL error in: torch_npu/csrc/distributed/ProcessGroupHCCL.cpp:64\n", "nccl_error"),
        ("EI0002: The wait execution of the Notify register times out. Reason: no Notify record from remote rank\n", "nccl_error"),
        ("RuntimeError: Timed out initializing process group in store based barrier on rank: 4, for key: store_based_barrier\n", "nccl_error"),
        ("RuntimeError: HIP error: invalid device function\n", "unsupported_gpu"),
        ("ptxas fatal   : Value 'sm_120' is not defined for option 'gpu-name'\n", "unsupported_gpu"),
        ("NotImplementedError: The operator 'aten::quantize_per_tensor' is not currently implemented for the MPS device.\n", "unsupported_gpu"),
        ("`cutlassB` is not supported because: Sm86 does not have enough shared-memory\n", "unsupported_gpu"),
        ("RuntimeError: Allocation is out of device memory on current platform.\n", "oom"),
        ("[ERROR] MD arena.cc:250] Init] cudaHostAlloc failed, ret[2], out of memory\n", "oom"),
        ("ImportError: /env/lib/libgomp.so.1: cannot allocate memory in static TLS block\n", "import_abi"),
        # the engine's parallel state refusing the layout for the world it started in
        ("RuntimeError: world_size (8) is not equal to tensor_model_parallel_size (1) x pipeline_model_parallel_size (1).\n", "engine_error"),
        # Windows' loader under torch and Paddle, TGI's shard killed by a signal, an OOM pasted lower-cased, NaN in a
        # library's own ValueError and in a GUI's words, a zero gradient told of every step, torch.ops without its library
        ('OSError: [WinError 126] The specified module could not be found. Error loading "C:\\env\\torch\\lib\\c10.dll"\n', "import_abi"),
        ("PreconditionNotMetError: The third-party dynamic library (cudnn64_7.dll) that Paddle depends on is not configured correctly.\n", "import_abi"),
        ("ERROR text_generation_launcher: Shard process was signaled to shutdown with signal 4 rank=0\n", "crash"),
        ('"cuda out of memory. tried to allocate 30.00 mib (gpu 0; 8.00 gib total capacity)"\n', "oom"),
        ("ValueError:  [x] nan loss\n", "nan_loss"),
        ("When training the GUI shows a nan loss and the preview is empty.\n", "nan_loss"),
        ("With fsdp2 the loss is not decreasing and grad_norm = 0 for all training steps.\n", "zero_grad"),
        ("AttributeError: '_OpNamespace' '_C' object has no attribute 'gelu_quick'\n", "missing_module"),
        # the module's closing quote typed as a backtick
        ("`from transformers import AdamW` throws `ImportError: cannot import name 'AdamW' from 'transformers` with 4.51\n", "api_mismatch"),
        # a model's remote code under transformers' dynamic-module cache is no package to install
        ("ModuleNotFoundError: No module named 'transformers_modules.org.model-v1'\n", "error"),
        ("ModuleNotFoundError: No module named 'flash_attn'\n", "missing_module"),
        # not words of a failure: advice, or a module path in prose
        ("Lower the batch size to avoid OOM on smaller cards.\n", "inconclusive"),
        ("Set a smaller max_model_len to avoid running out of memory.\n", "inconclusive"),
        ("See torch.nn.Module: the base class of every model.\n", "inconclusive"),
    ],
)
def test_a_failure_in_its_own_words(log: str, expected: str) -> None:
    assert verdict(log) == expected


def test_ddp_marking_a_parameter_twice_outranks_the_reduction_it_then_misses() -> None:
    log = (
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by use of a module parameter outside"
        " the `forward` function.\n"
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.\n"
    )
    assert verdict(log) == "ddp_ready_twice"


def test_a_link_to_a_line_of_a_packages_source_names_the_caller() -> None:
    log = (
        "The logging change breaks https://github.com/example/Trainer/blob/0123abc/trl/trainer/utils.py#L9\n"
        "`ImportError: cannot import name 'top_k_top_p_filtering' from 'transformers'`\n"
    )
    caller, callee, why = sides(log)
    assert (caller, callee) == ("trl", "transformers"), why
    # a link to the callee's own source is no caller
    assert sides(log.replace("/trl/trainer/", "/transformers/generation/"))[0] != "transformers"


def test_a_pinned_rebuild_fetches_the_recorded_releases_and_only_the_sources_new_to_the_list() -> None:
    specs = pinned(("torch", "transformers==4.30.2", "transformers==2.0.0", "a-package-not-indexed"))
    assert specs.count("transformers==4.30.2") == 1  # recorded: fetched as recorded, once
    assert "torch" not in specs and any(s.startswith("torch==") for s in specs)  # recorded at its release, not the newest
    assert specs[-2:] == ("transformers==2.0.0", "a-package-not-indexed")  # new to the list: added, nothing else moves


def test_an_init_printed_without_its_class_is_named_by_the_call_the_log_shows() -> None:
    log = (
        "With transformers 3.3.1 I get TypeError: __init__() got an unexpected keyword argument 'evaluation_strategy'.\n\n"
        "training_args = TrainingArguments(\n"
        '    output_dir="./out",\n'
        "    per_device_train_batch_size=16,\n"
        '    evaluation_strategy="steps",\n'
        ")\n"
        "trainer = Trainer(model=model, args=training_args)\n"
    )
    assert sides(log)[:2] == ("your code", "transformers")
    assert "constructs TrainingArguments" in crossed(log).callee_reason
    # two different classes passing it: neither is named
    both = log + "cfg = SFTConfig(\n    evaluation_strategy='no',\n)\n"
    assert "constructs" not in crossed(both).callee_reason


def test_the_path_of_a_packages_source_file_in_prose_names_the_caller_that_imports_the_callee() -> None:
    log = (
        "With the V1 engine I get `'AsyncLLM' object has no attribute 'engine'`.\n"
        "Commenting out line 334 of `swift/llm/infer/infer_engine/vllm_engine.py` makes it work.\n"
    )
    caller, callee, why = sides(log)
    assert (caller, callee) == ("ms-swift", "vllm"), why
    assert "imports vllm" in why
    # an installed copy's full path is a frame's, not a statement: nothing changes without a traceback around it
    assert sides(log.replace("`swift/", "`/usr/lib/python3/site-packages/swift/"))[0] != "ms-swift"


def test_a_failure_inside_a_package_entered_through_its_private_method_is_the_callers_mismatch() -> None:
    log = (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/lagent/llms/huggingface.py", line 197, in stream_generate\n'
        "    logits_processor = self.model._get_logits_processor(\n"
        f'  File "{SITE}/transformers/generation/utils.py", line 956, in _get_logits_processor\n'
        "    and generation_config._eos_token_tensor is not None\n"
        "AttributeError: 'GenerationConfig' object has no attribute '_eos_token_tensor'\n"
    )
    assert verdict(log) == "api_mismatch"
    caller, callee, why = sides(log)
    assert (caller, callee) == ("lagent", "transformers"), why
    assert "private _get_logits_processor" in why
    # entered through its public API: transformers' own failure
    public = log.replace("self.model._get_logits_processor(", "self.model.generate(")
    assert verdict(public) != "api_mismatch"
