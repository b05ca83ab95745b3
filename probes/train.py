"""The probe's GRPO loop: build, parity, setup, then a few sampled-and-scored steps. Orchestration only;
the arithmetic lives in probes.grpo, the models in probes.families."""

from __future__ import annotations

import argparse
import datetime
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed
import transformers

from probes import families, faults, grpo, parity
from probes.envfacts import environment_facts
from probes.record import Run

PROMPTS = ["Add 2 and 3:", "Name a colour:", "Say hi:", "Count to 3:"]
MAX_NEW_TOKENS = 16


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
    """Leave the process group (also after a failure, so a process that calls main() again can rejoin)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


@dataclass
class Trainee:
    """The model being trained and what the loop needs around it."""

    model: Any
    train_model: Any
    ref_model: Any | None
    trainable: dict[str, torch.Tensor]
    optimizer: torch.optim.Optimizer


def generation_config(args: argparse.Namespace, tokenizer: Any) -> Any:
    """Sampling as the scenario asks: do_sample with its temperature, top_p, top_k."""
    return transformers.GenerationConfig(
        do_sample=True,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_new_tokens=MAX_NEW_TOKENS,
        num_return_sequences=args.num_generations,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )


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
    """Reference model, frozen embeddings, checkpointing, LoRA, hooks, DDP and the optimizer, as the scenario asks."""
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
    train_model: Any = model
    if run.world > 1:
        train_model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=args.find_unused_parameters, static_graph=args.static_graph)
    optimizer = torch.optim.AdamW(list(trainable.values()), lr=args.lr, weight_decay=0.0)  # no decay: "changed" means learned
    return Trainee(model=model, train_model=train_model, ref_model=ref_model, trainable=trainable, optimizer=optimizer)


def sample(model: Any, prompts: Any, gen_config: Any, tokenizer: Any, seed: int, dtype: str, device: torch.device) -> grpo.Samples:
    """One sampling round under a fixed seed, in eval mode and without gradients, as trainers generate."""
    torch.manual_seed(seed)
    model.eval()
    with torch.no_grad(), parity.autocast(device, dtype):
        seqs = model.generate(**prompts, generation_config=gen_config)
    model.train()
    return grpo.split_samples(
        seqs, prompts["input_ids"].shape[1], tokenizer.eos_token_id, tokenizer.pad_token_id, lambda t: tokenizer.batch_decode(t, skip_special_tokens=True)
    )


def completion_logps(model: Any, samples: grpo.Samples, prompt_mask: torch.Tensor, group: int, dtype: str, device: torch.device) -> torch.Tensor:
    """Per-token log-probabilities of the completions (the prompt's mask repeated per generation)."""
    plen = prompt_mask.shape[1]
    attn_mask = torch.cat([prompt_mask.repeat_interleave(group, 0), samples.mask], 1)
    with parity.autocast(device, dtype):
        logits = model(input_ids=samples.sequences, attention_mask=attn_mask).logits[:, plen - 1 : -1]
    return grpo.token_logps(logits, samples.completions)


def train_step(
    t: Trainee, samples: grpo.Samples, prompt_mask: torch.Tensor, args: argparse.Namespace, device: torch.device, book: grpo.StepBook
) -> tuple[torch.Tensor, torch.Tensor, float | None, float]:
    """Score, compute the loss, step the optimizer; (rewards, loss, kl, grad_norm)."""
    G = args.num_generations
    rewards = grpo.rewards_for(samples.texts, G, device)
    adv = grpo.advantages(rewards, args.std)
    logp = completion_logps(t.train_model, samples, prompt_mask, G, args.dtype, device)
    ref_logp = None
    if t.ref_model is not None:
        with torch.no_grad():
            ref_logp = completion_logps(t.ref_model, samples, prompt_mask, G, args.dtype, device)
    loss, kl = grpo.grpo_loss(logp, adv, samples.mask, args.beta, ref_logp)
    t.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    book.note_grads(t.trainable.items())
    grad_norm = torch.nn.utils.clip_grad_norm_(list(t.trainable.values()), 1.0).item()
    t.optimizer.step()
    return rewards, loss, kl, grad_norm


def probe(run: Run, args: argparse.Namespace) -> int:
    """The whole measured run; returns 0 when it finished what it measures (the verdict is not ours)."""
    device = pick_device(args.device, run.world)
    if run.world > 1:
        init_distributed(device, args.collective_timeout)
    run.result["env"] = environment_facts(device)
    run.stage("build")
    run.save()

    t = time.perf_counter()
    attn = args.attn
    fault_note = None
    if args.fault == "broken_attention":
        fault_note = faults.register_broken_attention()
        if fault_note is None:
            attn = faults.BROKEN_ATTENTION
    run.result["fault"] = {"name": args.fault, "applied": args.fault != "none" and fault_note is None, "note": fault_note}
    source = families.ModelSource(family=None if args.model else "qwen2", path=args.model, seed=args.seed)
    tokenizer = families.load_tokenizer(source)
    model = families.build_model(source, attn, tokenizer).to(device)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    run.timing("build_s", t)

    run.stage("parity")
    t = time.perf_counter()
    run.result["parity"] = parity.text_parity(source, attn, args.dtype, tokenizer, state, device)
    run.timing("parity_s", t)
    run.save()

    run.stage("setup")
    trainee = setup(run, args, source, attn, model, tokenizer, state, device)
    book = grpo.StepBook.start(trainee.trainable)
    gen_config = generation_config(args, tokenizer)
    prompts = tokenizer(PROMPTS, return_tensors="pt", padding=True).to(device)
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
        samples = sample(trainee.model, prompts, gen_config, tokenizer, args.seed * 7919 + step * 101 + run.rank, args.dtype, device)
        rewards, loss, kl, grad_norm = train_step(trainee, samples, prompts["attention_mask"], args, device, book)
        row = grpo.metrics_row(step + 1, loss.item(), grad_norm, rewards, samples.mask, samples.texts, time.perf_counter() - t_step, kl)
        book.note_row(row)
        run.result["first_nonfinite_step"] = book.first_nonfinite_step
        run.emit(row)
        if step == 0:
            run.result["samples"] = [repr(x) for x in samples.texts[: 2 * args.num_generations]]
        run.result["steps_completed"] = step + 1
        run.result["grad_norm_first_steps"] = list(book.grad_norms)
        run.save()
    run.timing("train_s", t_train)
    run.result["params"] = book.params_summary(trainee.trainable)
    run.result.update(finished=True, stage="done")
    if run.world > 1:
        torch.distributed.barrier()
    return 0
