"""The training engines' known failures (DeepSpeed ZeRO, FSDP, accelerate): how each reads in a log, what
causes it, which releases fix it, where that is written publicly, and the class its mechanism is.

One rule for the matrix's findings and users' logs: a failure is judged by its mechanism, not by which table knows it. A
known failure where one package calls another with an API the installed release lacks (transformers >= 4.52 calling
accelerate's `unwrap_model(keep_torch_compile=…)`, deepspeed importing torch internals torch removed) is `api_mismatch`,
as the same line in a user's log is (verdict/boundary.py); a failure of the engine's own logic is `engine_error`.

The one owner of these facts: the classifier's `engine_error` signatures are these patterns (most decisive
first), its remedy is the matching entry's, and the sources travel with it so a user can check the claim.
Patterns are RE2 (linear time); `\\s+` between words survives terminal wrapping.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineFailure:
    """One failure of the engine layer, as users meet it."""

    pattern: str  # what the log shows (RE2)
    remedy: str  # the cause in one clause, then what to install or set
    sources: tuple[str, ...]  # public reports and fixes
    outcome: str = "engine_error"  # its mechanism's class: `api_mismatch` where two releases' APIs do not meet


# fmt: off
FAILURES: dict[str, EngineFailure] = {
    "ckpt_recompute": EngineFailure(
        r"Recomputed\s+values\s+for\s+the\s+following\s+tensors\s+have\s+different\s+metadata",
        "non-reentrant gradient checkpointing recomputed a parameter that DeepSpeed ZeRO-3 had already released (recomputed shape [0]: "
        "frozen or LoRA-base weights): use gradient_checkpointing_kwargs={'use_reentrant': True} under ZeRO-3 with LoRA or frozen "
        "parameters, or shard with FSDP2; TRL 0.27-1.8 default to use_reentrant=False and trl >= 1.9.0 forces True for PEFT + ZeRO-3",
        ("https://github.com/huggingface/transformers/issues/47254", "https://github.com/huggingface/trl/issues/2514",
         "https://github.com/deepspeedai/DeepSpeed/issues/4332", "https://github.com/huggingface/trl/pull/6356"),
    ),
    "scheduler_param_groups": EngineFailure(
        r"zip\(self\.optimizer\.param_groups,\s*values,\s*strict=True\)",
        "DeepSpeed dropped an empty optimizer param group (LoRA leaves the Trainer's no-decay group empty) after the Trainer had "
        "built its LR scheduler over both groups, and torch >= 2.10 checks the count: use transformers >= 5.1.0 (it builds the "
        "scheduler after accelerator.prepare), or pass an optimizer whose every param group holds a trainable parameter",
        ("https://github.com/huggingface/transformers/pull/43711", "https://github.com/huggingface/transformers/pull/43692",
         "https://github.com/modelscope/ms-swift/issues/8299"),
    ),
    "coordinator_trace": EngineFailure(
        r"pop\s+from\s+an\s+empty\s+deque",
        "ZeRO-3's parameter coordinator kept a trace recorded before generation took its hooks off and put them back: "
        "use deepspeed >= 0.19.2 or trl >= 1.5.0 (both invalidate the trace when the hooks come back)",
        ("https://github.com/huggingface/trl/issues/4899", "https://github.com/deepspeedai/DeepSpeed/pull/8043",
         "https://github.com/huggingface/trl/pull/4693"),
    ),
    "allgather_dtype": EngineFailure(
        r"output\s+tensor\s+must\s+have\s+the\s+same\s+type\s+as\s+input\s+tensor",
        "ZeRO-3 all-gathered parameters of two dtypes into one buffer (a bf16 base beside fp32 LoRA adapters or fp32 modules): keep "
        "the parameters in one dtype; with deepspeed 0.19.2, which stopped casting ZeRO-Init models to bf16, use deepspeed >= 0.19.3 "
        "(or <= 0.19.1), or trl >= 1.7.0 (adapters kept in the base's dtype)",
        ("https://github.com/deepspeedai/DeepSpeed/issues/8072", "https://github.com/huggingface/trl/pull/6091",
         "https://github.com/deepspeedai/DeepSpeed/issues/4873"),
    ),
    "hook_grad_fn": EngineFailure(
        r"'NoneType'\s+object\s+has\s+no\s+attribute\s+'next_functions'",
        "deepspeed 0.18.3-0.18.6 counts parameters in a backward hook with grad mode off, which torch <= 2.4 does not allow: "
        "use deepspeed >= 0.18.7 or torch >= 2.5",
        ("https://github.com/deepspeedai/DeepSpeed/issues/7830", "https://github.com/deepspeedai/DeepSpeed/pull/7841"),
    ),
    "elastic_import": EngineFailure(
        r"cannot\s+import\s+name\s+'?(?:log|_get_socket_with_port)'?\s+from\s+'?torch\.distributed\.elastic",
        "deepspeed <= 0.14.3 imports torch.distributed.elastic internals that torch 2.4 removed: use deepspeed >= 0.14.4",
        ("https://github.com/deepspeedai/DeepSpeed/issues/5603", "https://github.com/deepspeedai/DeepSpeed/pull/5654"),
        "api_mismatch",
    ),
    "launcher_local_rank": EngineFailure(
        r"unrecognized\s+arguments:[^\n]*--local-rank(?:=|\s)\d",
        "torch.distributed.launch passes `--local-rank=N` to the script from torch 2.0 (`--local_rank` before), and the script's "
        "argument parser knows only the old spelling: accept both (`parser.add_argument('--local-rank', '--local_rank', "
        "dest='local_rank')`) or read os.environ['LOCAL_RANK'] and launch with torchrun; or run torch < 2.0",
        ("https://pytorch.org/docs/stable/distributed.html#launch-utility", "https://github.com/open-mmlab/mmagic/pull/2051",
         "https://github.com/megvii-research/NAFNet/issues/134"),
        "api_mismatch",
    ),
    "gym_step_api": EngineFailure(
        r"=[ \t]*[\w.\[\]]*\w*env\w*(?:\.\w+)*\.(?:step|reset)\([^\n]*\n(?:[^\n]*\n){0,12}?[^\n]*(?:too many|not enough) values to unpack"
        r" \(expected [1-5](?:, got [1-5])?\)"
        # the environment checker's words for an environment written for the old API (gym 0.26's and Gymnasium's
        # passive_env_checker: `The result returned by `env.reset()` was not a tuple of the form `(obs, info)``)
        r"|The result returned by `env\.reset\(\)` was not a tuple of the form `\(obs, info\)`",
        "gym 0.26 (and every Gymnasium release) returns five values from env.step() (observation, reward, terminated, truncated, "
        "info) and two from env.reset() (observation, info), where gym <= 0.25 returned four and the observation alone: code "
        "written for one API unpacks the other's; install the gym the code was written for (gym < 0.26 for the old API), or "
        "update the code (or wrap an old environment in gymnasium's EnvCompatibility)",
        ("https://gymnasium.farama.org/main/release_notes/gym_v0.26.0/", "https://gymnasium.farama.org/content/migration-guide/"),
        "api_mismatch",
    ),
    "unwrap_keep_torch_compile": EngineFailure(
        r"unwrap_model\(\)\s+got\s+an\s+unexpected\s+keyword\s+argument\s+'keep_torch_compile'",
        "transformers >= 4.52 calls accelerate's unwrap_model(keep_torch_compile=...), which accelerate has from 1.3.0, while it still "
        "declares accelerate>=0.26: install accelerate >= 1.3.0",
        ("https://github.com/instructlab/instructlab/issues/3456", "https://github.com/huggingface/transformers/pull/38339"),
        "api_mismatch",
    ),
    "fsdp_unallocated": EngineFailure(
        r"has\s+a\s+non-zero\s+number\s+of\s+elements,\s+but\s+its\s+data\s+is\s+not\s+allocated\s+yet",
        "generation ran on FSDP-sharded weights that were never gathered: GRPOTrainer supports FSDP from trl 0.18.0; "
        "on older TRL train with DeepSpeed ZeRO-3",
        ("https://github.com/huggingface/trl/issues/2796", "https://github.com/huggingface/trl/pull/3260"),
    ),
    "fsdp2_mixed_dtensor": EngineFailure(
        r"got\s+mixed\s+torch\.Tensor\s+and\s+DTensor",
        "generate ran outside FSDP2's forward (LoRA adapters left as plain tensors beside DTensor weights): transformers >= 5.0.0 "
        "registers generate as an FSDP forward method; or call torch.distributed.fsdp.register_fsdp_forward_method(model, 'generate')",
        ("https://github.com/huggingface/trl/issues/4550", "https://github.com/huggingface/transformers/pull/42436"),
    ),
    "zero3_device_map": EngineFailure(
        r"DeepSpeed\s+Zero-3\s+is\s+not\s+compatible\s+with\s+passing\s+a\s+`?device_map",
        "the model was loaded with a device_map under ZeRO-3 (TRL sets device_map='auto' unless it sees a multi-GPU or DeepSpeed run): "
        "pass model_init_kwargs={'device_map': None}, or load the model yourself without one",
        ("https://github.com/huggingface/transformers/blob/v4.57.6/src/transformers/modeling_utils.py",),
    ),
    "cpu_accelerator_ipex": EngineFailure(
        r"CPU_Accelerator\s+requires\s+intel_extension_for_pytorch",
        "this deepspeed's CPU accelerator needs Intel's extension for PyTorch: use a deepspeed whose CPU accelerator runs on plain torch "
        "(0.15.4 and later here) or install intel_extension_for_pytorch for this torch",
        ("https://github.com/deepspeedai/DeepSpeed/blob/v0.14.0/accelerator/real_accelerator.py",),
    ),
    "cpu_numactl": EngineFailure(
        r"No\s+such\s+file\s+or\s+directory:\s+'numactl'",
        "this deepspeed binds its CPU ranks to NUMA nodes with the numactl program, which is not installed: install numactl "
        "(apt-get install numactl), or use a deepspeed whose CPU accelerator does without it (0.16.9 does here)",
        ("https://github.com/deepspeedai/DeepSpeed/blob/v0.15.4/deepspeed/utils/numa.py",),
    ),
}
# fmt: on


def known(variant: str) -> EngineFailure | None:
    """The known failure a verdict's rule name (`api_mismatch:unwrap_keep_torch_compile`) stands for, if any."""
    outcome, _, name = variant.partition(":")
    failure = FAILURES.get(name)
    return failure if failure is not None and failure.outcome == outcome else None


def remedy_for(name: str) -> str:
    """The remedy of a failure by name, with its first source."""
    failure = FAILURES[name]
    return f"{failure.remedy} (see {failure.sources[0]})"


@dataclass(frozen=True)
class Layer:
    """An engine layer, known by the module its frames are in, and what to do about a failure in it nobody listed yet."""

    name: str
    modules: tuple[str, ...]  # module prefixes of its frames
    words: tuple[str, ...]  # how messages name it
    remedy: str


# fmt: off
LAYERS: tuple[Layer, ...] = (
    Layer("DeepSpeed", ("deepspeed",),
          ("DeepSpeed", "deepspeed", "ZeRO", "zero_optimization", "ZeroParamStatus", "ds_status", "ds_summary", "ds_numel", "ds_tensor",
           "micro_batch_per_gpu", "train_micro_batch_size_per_gpu", "Micro batch size per gpu", "gradient_accumulation_steps"),
          "DeepSpeed raised it: check the DeepSpeed config against the trainer (batch sizes, stage, offload), and match deepspeed to "
          "the torch and transformers releases it supports (DeepSpeed's own changelog names them); rerun without ZeRO to tell the "
          "engine from the model"),
    Layer("torch FSDP", ("torch.distributed.fsdp", "torch.distributed._composable.fsdp", "torch.distributed.tensor"),
          ("FSDP", "FlatParameter", "fully_shard", "DTensor"),
          "torch's FSDP raised it: wrap the model's layers uniformly (one dtype and one requires_grad per wrapped unit; LoRA and "
          "frozen layers need use_orig_params=True or FSDP2), and use the trainer's FSDP settings for this torch release"),
    Layer("accelerate", ("accelerate",), ("accelerate", "Accelerator", "AcceleratorState"),
          "accelerate raised it while preparing or running the engine: check the launch config (accelerate config / the DeepSpeed "
          "or FSDP plugin) against the script, and use the accelerate release the trainer requires"),
    Layer("Megatron", ("megatron",), ("Megatron", "megatron"),
          "Megatron raised it: check the parallel sizes, the data and the checkpoint against this Megatron release"),
    Layer("vLLM", ("vllm",), ("vLLM", "vllm", "EngineCore", "LLMEngine"),
          "vLLM raised it while loading or generating: match vllm to the release the trainer supports (TRL, verl and OpenRLHF "
          "each pin a range), check the model's architecture is one this vLLM supports, and its memory settings "
          "(gpu_memory_utilization, max_model_len)"),
    Layer("SGLang", ("sglang",), ("SGLang", "sglang"),
          "SGLang raised it: match sglang to the release the trainer supports and check its memory settings (mem_fraction_static)"),
)
# fmt: on


def layer_of(module: str) -> Layer | None:
    """The engine layer a frame's module belongs to, if any."""
    return next((layer for layer in LAYERS if any(module == m or module.startswith(m + ".") for m in layer.modules)), None)


def layer_named(text: str) -> Layer | None:
    """The engine layer a message names (when it has no frames to say where it came from)."""
    import re

    return next((layer for layer in LAYERS if any(re.search(rf"\b{re.escape(w)}\b", text) for w in layer.words)), None)
