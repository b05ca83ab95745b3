"""The probe's GRPO loop: build, parity, setup, then a few sampled-and-scored steps. Orchestration only;
the arithmetic lives in probes.grpo, the models in probes.families."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed
import transformers

from probes import engines, families, faults, fingerprint, grpo, kernels, parity, shrink, vision
from probes.envfacts import environment_facts
from probes.record import ProbeInputError, Run

PROMPTS = ["Add 2 and 3:", "Name a colour:", "Say hi:", "Count to 3:"]
MAX_NEW_TOKENS = 16
#: what Qwen2-VL ships in its generation_config.json: near-greedy sampling
NEAR_GREEDY = {"do_sample": True, "temperature": 0.01, "top_p": 0.001, "top_k": 1}


def pick_device(requested: str, world: int) -> torch.device:
    """auto → cuda when available; under DDP each rank takes its LOCAL_RANK's GPU."""
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if requested == "auto" else requested)
    if world > 1 and device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    return device


def init_distributed(device: torch.device, timeout_s: float) -> None:
    torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(seconds=timeout_s))


def end_distributed() -> None:
    """Leave the process group (also after a failure, so a process that calls main() again can rejoin). Not
    where vLLM ran in this process: its engine leaves its own groups at exit and fails if the default is gone."""
    if "vllm" in sys.modules:
        return
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@dataclass
class Trainee:
    """The model being trained and what the loop needs around it."""

    model: Any
    train_model: Any
    ref_model: Any | None
    trainable: dict[str, torch.Tensor]
    engine: engines.Engine


def sampling_kwargs(args: argparse.Namespace, tokenizer: Any) -> dict[str, Any]:
    """Sampling as the scenario (the trainer) asks: do_sample with its temperature, top_p, top_k; never the
    vision placeholders (a sampled image token would not match any image in the training forward)."""
    vision_ids = [i for i in tokenizer.convert_tokens_to_ids(list(families.VISION_TOKENS)) if i is not None and i != tokenizer.unk_token_id]
    return {
        **({"suppress_tokens": vision_ids} if vision_ids else {}),
        "do_sample": True,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_new_tokens": MAX_NEW_TOKENS,
        "num_return_sequences": args.num_generations,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id,
    }


def generate_kwargs(args: argparse.Namespace, tokenizer: Any) -> dict[str, Any]:
    """What generate() receives beyond the prompts: the settings as generate kwargs (`kwargs`) or inside a
    GenerationConfig (the default, and `config`), the two ways trainers pass them."""
    settings = sampling_kwargs(args, tokenizer)
    if args.saved_gen_config == "kwargs":
        return settings
    return {"generation_config": transformers.GenerationConfig(**settings)}


def save_near_greedy(source: families.ModelSource, model: Any, tokenizer: Any, folder: Path) -> families.ModelSource:
    """Save the model with a near-greedy generation_config.json and load it back the way users do, so
    generate() sees the file's settings as the model's defaults."""
    model.generation_config = transformers.GenerationConfig(
        **NEAR_GREEDY, **{k: getattr(tokenizer, k) for k in ("pad_token_id", "eos_token_id", "bos_token_id")}
    )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return families.ModelSource(family=None, path=str(folder), seed=source.seed, vision=source.vision, origin=source.label)


def setup(
    run: Run,
    args: argparse.Namespace,
    source: families.ModelSource,
    attn: str,
    model: Any,
    tokenizer: Any,
    state: dict[str, torch.Tensor],
    device: torch.device,
) -> Trainee:
    """Reference model, frozen embeddings, checkpointing, LoRA, hooks, then the engine (DDP, FSDP2 or ZeRO,
    with its optimizer), as the scenario asks."""
    ref_model = families.build_model(source, attn, tokenizer, state).to(device).eval() if args.beta > 0 else None
    if args.freeze_embeddings:
        model.get_input_embeddings().requires_grad_(False)
    if args.grad_ckpt != "off":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": args.grad_ckpt == "reentrant"})
    if args.lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0))
    hooks = faults.input_grad_hooks(model)
    if not args.input_grad_hook:
        faults.remove_input_grad_hooks(model, hooks)
    run.result["input_grad_hook"] = {"hooks_after_setup": len(hooks), "removed": 0 if args.input_grad_hook else len(hooks)}
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    run.result.setdefault("model", {})["trainable_vision_params"] = sum("visual" in n for n in trainable)
    engine, trainable = engines.make(
        args.parallel,
        model,
        trainable,
        lr=args.lr,
        dtype=args.dtype,
        micro_batch=len(PROMPTS) * args.num_generations,
        device=device,
        ddp={"find_unused_parameters": args.find_unused_parameters, "static_graph": args.static_graph},
    )
    run.result["engine"] = engine.facts()
    return Trainee(model=model, train_model=engine.train_model, ref_model=ref_model, trainable=trainable, engine=engine)


@dataclass(frozen=True)
class Prompts:
    """The prompt batch for generate() (with images for a VLM) and, per generated sequence, what the
    training forward needs besides the sequence: the prompt's mask and its images."""

    batch: dict[str, torch.Tensor]
    mask: torch.Tensor
    images: dict[str, torch.Tensor]


def make_prompts(source: families.ModelSource, tokenizer: Any, model: Any, group: int, seed: int, device: torch.device) -> Prompts:
    if source.vision:
        batch = vision.image_batch(tokenizer, PROMPTS, model, seed)
        pixels, grid = vision.repeat_images(batch["pixel_values"], batch["image_grid_thw"], group)
        images = {"pixel_values": pixels.to(device), "image_grid_thw": grid.to(device)}
    else:
        texts, templated = families.format_prompts(tokenizer, PROMPTS)
        batch, images = dict(tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not templated)), {}
    batch = {k: v.to(device) for k, v in batch.items()}
    return Prompts(batch=batch, mask=batch["attention_mask"], images=images)


def sample(model: Any, prompts: Prompts, gen_kwargs: dict[str, Any], tokenizer: Any, seed: int, dtype: str, device: torch.device) -> grpo.Samples:
    """One sampling round under a fixed seed, in eval mode and without gradients, as trainers generate."""
    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad(), parity.autocast(device, dtype):
        seqs = model.generate(**prompts.batch, **gen_kwargs)
    model.train()
    return grpo.split_samples(
        seqs, prompts.batch["input_ids"].shape[1], tokenizer.eos_token_id, tokenizer.pad_token_id, lambda t: tokenizer.batch_decode(t, skip_special_tokens=True)
    )


def completion_logps(model: Any, samples: grpo.Samples, prompts: Prompts, group: int, dtype: str, device: torch.device) -> torch.Tensor:
    """Per-token log-probabilities of the completions (the prompt's mask and images repeated per generation)."""
    plen = prompts.mask.shape[1]
    attn_mask = torch.cat([prompts.mask.repeat_interleave(group, 0), samples.mask], 1)
    types = vision.token_types(model, samples.sequences) if prompts.images else {}
    with parity.autocast(device, dtype):
        logits = model(input_ids=samples.sequences, attention_mask=attn_mask, **prompts.images, **types).logits[:, plen - 1 : -1]
    return grpo.token_logps(logits, samples.completions)


def train_step(
    t: Trainee, samples: grpo.Samples, prompts: Prompts, args: argparse.Namespace, device: torch.device, book: grpo.StepBook
) -> tuple[torch.Tensor, torch.Tensor, float | None, float]:
    """Score, compute the loss, step the optimizer; (rewards, loss, kl, grad_norm)."""
    G = args.num_generations
    rewards = grpo.rewards_for(samples.texts, G, device)
    adv = grpo.advantages(rewards, args.std)
    logp = completion_logps(t.train_model, samples, prompts, G, args.dtype, device)
    ref_logp = None
    if t.ref_model is not None:
        with torch.no_grad():
            ref_logp = completion_logps(t.ref_model, samples, prompts, G, args.dtype, device)
    loss, kl = grpo.grpo_loss(logp, adv, samples.mask, args.beta, ref_logp)
    t.engine.zero_grad()
    t.engine.backward(loss)
    book.note_grads(t.engine.whole_grads(t.trainable))
    grad_norm = t.engine.step(list(t.trainable.values()))
    return rewards, loss, kl, grad_norm


#: The head size a vLLM cell's tiny model gets, whatever the device: vLLM's CPU attention supports 32, 64, 80, ...
#: (vllm/v1/attention/backends/cpu_attn.py, 0.31); its FlashAttention backend on GPU accepts multiples of 8 up to
#: 256 in 0.31 but listed 32, 64, 96, ... in older releases, where head size 16 falls back to FlexAttention, a
#: path users never take. The tiny families use 16, so a vLLM cell builds the same hidden size in wider heads,
#: one shape on every device and release: chosen for the engine, not the device.
VLLM_HEAD_DIM = 32


def engine_head_dim(use_vllm: bool, source: families.ModelSource) -> int | None:
    """The head size a built-in text family is widened to for the generation engine, or None (as built)."""
    return VLLM_HEAD_DIM if use_vllm and source.family is not None and not source.vision else None


def build(run: Run, args: argparse.Namespace, device: torch.device) -> tuple[families.ModelSource, str, Any, Any, dict[str, torch.Tensor]]:
    """The fault's attention (if any), the model source, tokenizer, model and its initial weights."""
    attn = args.attn
    fault_note = None
    if args.fault in faults.FAULT_ATTENTION:
        name, register = faults.FAULT_ATTENTION[args.fault]
        fault_note = register()
        if fault_note is None:
            attn = name
    run.result["fault"] = {"name": args.fault, "applied": args.fault != "none" and fault_note is None, "note": fault_note}
    source = families.resolve(args.model, args.seed, shrunk=args.shrink, trust_remote_code=args.trust_remote_code)
    if (head_dim := engine_head_dim(args.use_vllm, source)) is not None:
        source = dataclasses.replace(source, head_dim=head_dim)
    run.result["model"] = {"source": source.label, "vision": source.vision, "attn": attn}
    if source.head_dim is not None:
        run.result["model"]["head_dim"] = source.head_dim
    tokenizer, noted = families.load_tokenizer(source)
    if source.path:  # a user's checkpoint: say what its tokenizer needed (the built-in families' need nothing)
        run.result["model"]["tokenizer"] = noted
    if source.shrink:  # the user's architecture, checked at full size in resolve, made tiny once
        source = families.shrunk(source, tokenizer, PROMPTS, parity.PARITY_TEXTS)
    model = families.build_model(source, attn, tokenizer).to(device)
    if args.fault == "drift":  # the whole run computes with the changed default, not only the fingerprint
        fingerprint.perturb(model)
    if source.shrink:
        run.result["model"]["shrunk"] = shrunk_facts(source, model)
    if args.saved_gen_config != "none":
        source = save_near_greedy(source, model, tokenizer, run.out / f".checkpoint-rank{run.rank}")
        model = families.build_model(source, attn, tokenizer).to(device)
        run.result["generation"] = {
            "saved": NEAR_GREEDY,
            "asked": {k: getattr(args, k) for k in ("temperature", "top_p", "top_k")},
            "passed_as": args.saved_gen_config,
        }
    run.result["model"]["class"] = type(model).__name__
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return source, attn, tokenizer, model, state


def shrunk_facts(source: families.ModelSource, model: Any) -> dict[str, Any]:
    """What the user's architecture became: its type, layers kept, size, each key shrunk, the full-size check."""
    assert source.tiny is not None
    config, changes, notes = source.tiny.config, source.tiny.changes, source.tiny.notes
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return {
        "model_type": config.model_type,
        "layers": getattr(text, "num_hidden_layers", None),
        "params": sum(p.numel() for p in model.parameters()),
        "changes": {k: f"{v[0]} → {v[1]}" for k, v in shrink.shown(changes).items()},
        "notes": list(notes),
    }


def kernel_stage(run: Run, mode: str, device: torch.device) -> None:
    """Real-size GEMMs and attention; the shape being run is on disk before it runs."""
    t = time.perf_counter()
    run.stage("kernels")

    def before(label: dict[str, Any]) -> None:
        run.result["kernels"] = {"running": label}
        run.save()

    run.result["kernels"] = kernels.run_stage(device, mode, before)
    run.timing("kernels_s", t)
    run.save()


def fingerprint_stage(run: Run, source: families.ModelSource, attn: str, args: argparse.Namespace, tokenizer: Any, device: torch.device) -> None:
    """The numeric fingerprint on shared inputs (probes/fingerprint.py), outside the run's random state. It
    measures; a failure here is written down and never ends the run (drift is a finding, not an outcome)."""
    t = time.perf_counter()
    run.stage("fingerprint")
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            run.result["fingerprint"] = fingerprint.measure(source, attn, args.dtype, tokenizer, PROMPTS, device, args.fault)
    except Exception as exc:  # the numbers could not be taken here: say why, train on
        run.result["fingerprint"] = {"version": fingerprint.FINGERPRINT_VERSION, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
    run.timing("fingerprint_s", t)
    run.save()


def probe(run: Run, args: argparse.Namespace) -> int:
    """The whole measured run; returns 0 when it finished what it measures (the verdict is not ours)."""
    if args.parallel != "ddp" and run.world < 2:
        raise ProbeInputError(f"--parallel {args.parallel} shards across ranks: run it on 2 or more (torchrun --nproc-per-node 2)")
    device = pick_device(args.device, run.world)
    if run.world > 1:
        init_distributed(device, args.collective_timeout)
    run.result["env"] = environment_facts(device)
    run.stage("build")
    run.save()

    t = time.perf_counter()
    source, attn, tokenizer, model, state = build(run, args, device)
    run.timing("build_s", t)

    run.stage("parity")
    t = time.perf_counter()
    image_batch = vision.image_batch(tokenizer, parity.PARITY_TEXTS, model, args.seed + 1) if source.vision else None
    run.result["parity"] = parity.model_parity(source, attn, args.dtype, tokenizer, state, device, image_batch)
    run.timing("parity_s", t)
    run.save()

    fingerprint_stage(run, source, attn, args, tokenizer, device)

    if args.kernels != "off":
        kernel_stage(run, args.kernels, device)

    if args.trainer == "trl":  # TRL's GRPOTrainer instead of the built-in loop below (trl is imported only here)
        from probes import trl_trainer

        return trl_trainer.run_trl(args, model, tokenizer, run.out, run.result, run.save, prompts=PROMPTS, reward=grpo.reward_fn, max_new_tokens=MAX_NEW_TOKENS)

    run.stage("setup")
    trainee = setup(run, args, source, attn, model, tokenizer, state, device)
    book = grpo.StepBook.start(trainee.engine.whole(trainee.trainable))
    gen_kwargs = generate_kwargs(args, tokenizer)
    prompts = make_prompts(source, tokenizer, model, args.num_generations, args.seed, device)
    run.result.update(trainable_params=len(trainee.trainable), samples=[])
    run.stage("train")
    t_train = time.perf_counter()
    run.open_metrics()
    for step in range(args.steps):
        t_step = time.perf_counter()
        if args.fault == "sigfpe" and step == 1 and run.rank == run.world - 1:
            run.save()
            run.log("injecting a trapping integer division (fault sigfpe)")
            faults.inject_sigfpe()
        with trainee.engine.generating():
            samples = sample(trainee.model, prompts, gen_kwargs, tokenizer, args.seed * 7919 + step * 101 + run.rank, args.dtype, device)
        rewards, loss, kl, grad_norm = train_step(trainee, samples, prompts, args, device, book)
        row = grpo.metrics_row(step + 1, loss.item(), grad_norm, rewards, samples.mask, samples.texts, time.perf_counter() - t_step, kl)
        book.note_row(row)
        run.result["first_nonfinite_step"] = book.first_nonfinite_step
        run.emit(row)
        if step == 0:
            run.result["samples"] = [repr(x) for x in samples.texts[: 2 * args.num_generations]]
        run.result["steps_completed"] = step + 1
        run.result["grad_norm_first_steps"] = list(book.grad_norms)
        if "generation" in run.result:
            ratios = run.result["generation"].setdefault("distinct_ratio", [])
            ratios.append(row["distinct_ratio"])
        run.save()
    run.timing("train_s", t_train)
    run.result["params"] = book.params_summary(trainee.engine.whole(trainee.trainable))
    run.result.update(finished=True, stage="done")
    if run.world > 1:
        torch.distributed.barrier()
    return 0
