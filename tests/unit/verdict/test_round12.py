"""Issue 41, seventeenth round: failures in more layers' words (ptxas refusing an instruction the GPU lacks, a KV cache too
small for one request, Windows' and macOS's loaders, faulthandler's abort in ctypes' loader, vLLM's dead engine, a
user's words for a job stopped at its wall-clock mark), what is no mismatch although it reads like one (a misspelt
class, a module without its own `__version__`, an object handed to a library that never heard of its package), and the
caller where the frames do not show it (a library building a class it picked with the keywords its caller passed, a
range whose message tells which package to upgrade, `python -c`, pip's resolver). Each log is written for its mechanism;
none is a held-out log."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from verdicts import sides, verdict

from envmatrix.facts.nameindex import misspelt, requires
from envmatrix.facts.nameindex_build import build, read_all
from envmatrix.verdict.logscan import scan_text
from envmatrix.verdict.remedies import of_mismatch

SITE = "/usr/local/lib/python3.10/site-packages"


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ("ptxas /tmp/tmpab12.ptx, line 277; error   : Feature 'cvt.bf16.f32' requires .target sm_80 or higher\n", "unsupported_gpu"),
        (
            "The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (20112)."
            " Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n",
            "oom",
        ),
        ("Our nightly training job times out after 120 minutes every time now.\n", "timeout"),
        ("import error\n\nDLL load failed while importing fused_adam_cuda: The specified procedure could not be found.\n", "import_abi"),
        (
            f"ImportError: dlopen({SITE}/tok/_tok.cpython-310-darwin.so, 0x0002): Library not loaded: @rpath/libtok.0.dylib\n",
            "import_abi",
        ),
        ("libc10_cuda.so:%20undefined%20symbol:%20cudaGetDriverEntryPointByVersion\n", "import_abi"),
        (
            "Fatal Python error: Aborted\n\nCurrent thread 0x00007f31 (most recent call first):\n"
            '  File "/opt/conda/lib/python3.11/ctypes/__init__.py", line 376 in __init__\n',
            "import_abi",
        ),
        ('!!!!!!! Segfault encountered !!!!!!!\n  File "<unknown>", line 0, in cuMemcpyAsync\n', "crash"),
        ("ray.exceptions.RayTaskError(EngineDeadError): ray::Worker.generate() (pid=12, ip=10.0.0.1)\n", "engine_error"),
        ("With two GPUs the model outputs only exclamation marks under load.\n", "garbled_output"),
        (
            "RuntimeError: Failed to import transformers.models.bert.modeling_tf_bert because of the following error (look up to"
            " see its traceback):\nYour currently installed version of Keras is Keras 3, but this is not yet supported in"
            " Transformers. Please install the backwards-compatible tf-keras package with `pip install tf-keras`.\n",
            "api_mismatch",
        ),
        ("AssertionError: BLIP models are not compatible with transformers>=4.27, run pip install transformers==4.25\n", "api_mismatch"),
        ("ImportError: cannot import name 'load_ops' from 'transformer_engine.common' (unknown location)\n", "api_mismatch"),
        # the eighteenth round: more layers' words
        ("concurrent.futures.process.BrokenProcessPool: A process in the process pool was terminated abruptly while the future was running\n", "crash"),
        ("Your session crashed for an unknown reason.\n", "crash"),
        ("Your session crashed after using all available RAM.\n", "oom"),
        ("I get no available memory for the cache blocks every time, even at 0.95.\n", "oom"),
        ("hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\n", "unsupported_gpu"),
        ("RuntimeError: Couldn't load custom C++ ops. This can happen if your PyTorch and torchvision versions are incompatible\n", "import_abi"),
        ("jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Barrier_id: multihost_sync\n", "nccl_error"),
        ("E0120 model_lifecycle.cc:654] failed to load 'm': unable to find backend library for backend 'tensorrtllm'\n", "missing_module"),
        ("ModuleNotFoundError: No module named 'vllm.engine'; 'vllm' is not a package\n", "error"),
        ("[AttributeError: 'tensorrt.tensorrt.Builder' object has no attribute 'build_cuda_engine'](https://example.org/q/1)\n", "api_mismatch"),
        ("Runtime error:  jaxlib version is 0.1.69 but this version of jax requires 0.3.14.\n", "api_mismatch"),
        ("CUDA backend failed to initialize: Found cuDNN version 8600, but JAX was built against version 8906, which is newer.\n", "api_mismatch"),
        ("The client fails: `Client.__init__() got an unexpected keyword argument \u2018proxies\u2019`\n", "api_mismatch"),
    ],
)
def test_a_failure_in_its_own_layers_words(log: str, expected: str) -> None:
    assert verdict(log) == expected, log


def test_a_misspelt_class_is_the_codes_error_not_a_release_boundary() -> None:
    assert misspelt("BitssAndBytesConfig", "transformers") == "BitsAndBytesConfig"
    assert misspelt("LLaMATokenizer", "transformers") == ""  # a name that differs by case is a rename, not a typo
    assert misspelt("compiler", "torch") == ""  # a submodule or function the index need not list
    log = f"ImportError: cannot import name 'BitssAndBytesConfig' from 'transformers' ({SITE}/transformers/__init__.py)\n"
    assert verdict(log) == "error"
    removed = f"ImportError: cannot import name 'HybridCache' from 'transformers' ({SITE}/transformers/__init__.py)\n"
    assert verdict(removed) == "api_mismatch"  # a name an earlier release had


def test_a_module_without_its_own_version_is_a_shadowing_folder() -> None:
    assert verdict("AttributeError: module 'vllm' has no attribute '__version__'\n") == "error"
    assert verdict("AttributeError: module 'vllm' has no attribute 'LLMEngine'\n") == "api_mismatch"


def test_an_object_handed_to_a_library_that_never_imports_its_package_is_the_callers_error() -> None:
    def asked(member: str, cls: str) -> str:
        return (
            "Traceback (most recent call last):\n"
            '  File "/home/u/run.py", line 12, in <module>\n'
            "    out = model.generate(inputs, params)\n"
            f'  File "{SITE}/transformers/generation/utils.py", line 1349, in generate\n'
            "    model_kwargs = generation_config.update(**kwargs)\n"
            f"AttributeError: '{cls}' object has no attribute '{member}'\n"
        )

    assert verdict(asked("update", "SamplingParams")) == "error"  # transformers never imports vllm
    assert verdict(asked("update", "PeftModelForCausalLM")) == "api_mismatch"  # transformers does import peft


def test_a_library_building_a_class_with_its_callers_keywords_is_the_callee() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/sd/test.py", line 6, in <module>\n'
        '    pipe = StableDiffusionPipeline.from_pretrained("x")\n'
        f'  File "{SITE}/diffusers/pipeline_utils.py", line 517, in from_pretrained\n'
        "    loaded_sub_model = load_method(os.path.join(cached_folder, name), **loading_kwargs)\n"
        f'  File "{SITE}/transformers/modeling_utils.py", line 1843, in from_pretrained\n'
        "    model = cls(config, *model_args, **model_kwargs)\n"
        "TypeError: __init__() got an unexpected keyword argument 'device_map'\n"
    )
    caller, callee, why = sides(log)
    assert (caller, callee) == ("diffusers", "transformers"), why
    spelled = log.replace("**model_kwargs)", "device_map=device_map)")  # the line passes it itself: no keyword handed on
    assert sides(spelled)[:2] != ("diffusers", "transformers")


def test_a_range_printed_alone_names_the_package_its_message_says_to_upgrade() -> None:
    log = (
        "ImportError: tokenizers>=0.22.0,<=0.23.0 is required for a normal functioning of this module, but found"
        " tokenizers==0.23.1.\nTry: `pip install transformers -U` or `pip install -e '.[dev]'` if you're working with git main\n"
    )
    assert sides(log)[:2] == ("transformers", "tokenizers")


def test_a_one_liner_is_the_users_code_and_pips_resolver_names_both_sides() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        f"ImportError: cannot import name 'HybridCache' from 'transformers' ({SITE}/transformers/__init__.py)\n"
    )
    assert sides(log)[:2] == ("your code", "transformers")
    crossed = of_mismatch(scan_text("llamafactory 0.9.3 requires trl<=0.9.6,>=0.8.6, but you have trl 0.16.1 which is incompatible.\n"))
    assert crossed is not None and (crossed.caller, crossed.callee) == ("llamafactory", "trl")


def test_an_sdists_requirements_are_read_and_every_requirement_is_kept(tmp_path: Path) -> None:
    """deepspeed and flash-attn are published as sdists: their setup.py's install_requires is in the egg-info's requires.txt
    (before its first extra's section); a requirement the index does not read (pydantic) is kept too."""
    egg = tmp_path / "requires.txt"
    egg.write_text("numpy\npydantic>=2.0.0\ntorch>=2.0.0\n\n[all]\nxgboost\n")
    sdist = tmp_path / "demo-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(egg, arcname="demo-1.0/demo.egg-info/requires.txt")
        init = tmp_path / "__init__.py"
        init.write_text("class DemoEngine:\n    pass\n")
        tar.add(init, arcname="demo-1.0/demo/__init__.py")
    built = build(read_all([sdist]))
    assert built["requires"] == {"demo": ["numpy", "pydantic", "torch"]}  # type: ignore[comparison-overlap]
    assert requires("deepspeed", "torch") and requires("vllm", "pydantic")  # the committed index, rebuilt so


def test_a_librarys_own_refusal_of_keywords_names_it_the_callee_and_its_caller_the_asker() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/heads/metrics.py", line 14, in __init__\n'
        "    super().__init__(compute_on_step=False, dist_sync_on_step=True)\n"
        f'  File "{SITE}/torchmetrics/metric.py", line 145, in __init__\n'
        "    raise ValueError(f\"Unexpected keyword arguments: {', '.join(kwargs_)}\")\n"
        "ValueError: Unexpected keyword arguments: `compute_on_step`\n"
    )
    assert verdict(log) == "api_mismatch"
    assert sides(log)[:2] == ("heads (your code)", "torchmetrics")


def test_a_compiled_class_printed_with_its_module_is_that_packages() -> None:
    log = "AttributeError: 'tensorrt_bindings.tensorrt.Builder' object has no attribute 'build_engine'\n"
    assert sides(log)[1] == "tensorrt"
