#!/usr/bin/env python3
"""The fixed GRPO smoke-training probe: a tiny, deterministic GRPO run that exercises a stack the way RL
fine-tuning does, and writes what it measured. It decides no verdict (envmatrix's classifier does).

Imports only the standard library, torch and transformers (peft for LoRA): it runs INSIDE the
environment under test. Contract: command line in; `result.json`, `metrics.jsonl` and a progress line
per step out; exit 0 when it finished whatever it measured, non-zero on a crash.

    python probes/grpo_smoke.py --out DIR [options]
    torchrun --nproc-per-node 2 probes/grpo_smoke.py --out DIR [options]      # DDP (gloo on CPU)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

PROBE_VERSION = "1"
T0 = time.perf_counter()

PROMPTS = ["Add 2 and 3:", "Name a colour:", "Say hi:", "Count to 3:"]
MAX_NEW_TOKENS = 16
PARITY_TEXTS = ["The quick brown fox jumps", "Hi", "GRPO smoke test, left padded batch", "0123"]
BROKEN_ATTENTION = "envmatrix_broken"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Options mirror matrix.yaml's scenario fields (spec.Scenario.probe_args writes them)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for result.json and metrics.jsonl")
    p.add_argument("--model", default=None, help="a local checkpoint folder instead of the built-in tiny Qwen2 model")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--attn", default="sdpa", help="attention implementation (eager, sdpa, flash_attention_2, ...)")
    p.add_argument("--grad-ckpt", choices=("off", "reentrant", "non_reentrant"), default="off")
    p.add_argument("--lora", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--freeze-embeddings", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument(
        "--input-grad-hook",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the input-requires-grad hook the libraries add (--no-input-grad-hook removes it: a control)",
    )
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--std", choices=("biased", "unbiased"), default="unbiased", help="group std for advantages (TRL: unbiased)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 disables top-k")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient to a frozen reference (0: no reference)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--find-unused-parameters", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--fault", choices=("none", "broken_attention", "sigfpe"), default="none", help="inject a known failure (controls)")
    p.add_argument("--trainer", choices=("builtin", "trl"), default="builtin", help="the probe's own GRPO loop, or TRL's GRPOTrainer (trl_trainer.py)")
    p.add_argument("--use-vllm", action=argparse.BooleanOptionalAction, default=False, help="TRL only: generate with vLLM (colocate mode)")
    p.add_argument("--collective-timeout", type=float, default=60.0, help="seconds before a stuck collective fails")
    return p.parse_args(argv)


ARGS = parse_args()
OUT = Path(ARGS.out)
OUT.mkdir(parents=True, exist_ok=True)
# Nothing goes to the user's home or hub cache; no hub access at all.
os.environ.update(
    HF_HOME=str(OUT / ".hf"),
    HF_HUB_OFFLINE="1",
    TRANSFORMERS_OFFLINE="1",
    HF_DATASETS_OFFLINE="1",
    TOKENIZERS_PARALLELISM="false",
)
RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
RESULT_NAME = "result.json" if RANK == 0 else f"result.rank{RANK}.json"

RESULT: dict[str, Any] = {
    "probe_version": PROBE_VERSION,
    "rank": RANK,
    "pid": os.getpid(),
    "world_size": WORLD,
    "options": {k: v for k, v in vars(ARGS).items() if k != "out"},
    "finished": False,
    "stage": "import",
    "steps_completed": 0,
    "first_nonfinite_step": None,
    "timings": {},
}


def write_json(path: Path, data: Any) -> None:
    """Atomic write: a probe killed mid-write leaves the previous complete file."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str, allow_nan=True))
    os.replace(tmp, path)


def save() -> None:
    """Persist RESULT now: a process killed by a signal keeps what it had measured so far."""
    RESULT["timings"]["total_s"] = round(time.perf_counter() - T0, 3)
    write_json(OUT / RESULT_NAME, RESULT)


save()
import torch  # noqa: E402
import torch.distributed  # noqa: E402
import transformers  # noqa: E402

RESULT["timings"]["import_s"] = round(time.perf_counter() - T0, 3)


def _dist_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment_facts(device: torch.device) -> dict[str, Any]:
    """Versions and hardware read at run time inside the environment, never assumed from the plan."""
    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cxx11_abi": bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False)),
        "transformers": transformers.__version__,
        "tokenizers": _dist_version("tokenizers"),
        "flash_attn": _dist_version("flash-attn") or _dist_version("flash_attn"),
        "peft": _dist_version("peft"),
        "device": str(device),
        "cudnn": None,
        "cublas": _dist_version("nvidia-cublas-cu12") or _dist_version("nvidia-cublas"),
        "nccl": None,
        "gpu_name": None,
        "compute_capability": None,
        "driver": None,
        "cpu_threads": torch.get_num_threads(),
    }
    if device.type == "cuda":
        facts["cudnn"] = torch.backends.cudnn.version()
        facts["gpu_name"] = torch.cuda.get_device_name(device)
        facts["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        try:
            facts["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # NCCL may be absent from a build: report, do not fail
            facts["nccl"] = f"unavailable: {exc}"
        facts["driver"] = _driver_version()
    return facts


def _driver_version() -> str | None:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


# ---- model and tokenizer -------------------------------------------------------------------------


def build_tokenizer() -> Any:
    """A byte-level tokenizer built in code: 256 byte tokens + pad, bos, eos (259 in all), left padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for special in ("<pad>", "<s>", "</s>"):
        vocab[special] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>", model_input_names=["input_ids", "attention_mask"]
    )
    fast.padding_side = "left"
    return fast


def tiny_config(tokenizer: Any, attn: str) -> Any:
    """A Qwen2-style causal LM small enough to train on 2 CPU cores in a fraction of a second per step."""
    cfg = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        use_cache=True,
    )
    cfg._attn_implementation = attn
    return cfg


def build_model(attn: str, tokenizer: Any, state: dict[str, torch.Tensor] | None = None) -> Any:
    """A fresh model per attention implementation (older transformers fix the class at build time)."""
    model: Any
    if ARGS.model:
        model = transformers.AutoModelForCausalLM.from_pretrained(ARGS.model, attn_implementation=attn, torch_dtype=torch.float32)
    else:
        torch.manual_seed(ARGS.seed)
        model = transformers.Qwen2ForCausalLM(tiny_config(tokenizer, attn))
    if state is not None:
        model.load_state_dict(state)
    return model


def register_broken_attention() -> str | None:
    """Register a deliberately wrong attention kernel (sequence order reversed); None when unsupported."""
    iface = getattr(transformers, "AttentionInterface", None)
    if iface is None:
        return f"transformers {transformers.__version__} has no attention registry (AttentionInterface arrived in 4.48)"
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def broken(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, **kwargs: Any) -> Any:
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return out.flip(1), weights  # (batch, seq, heads, dim): every position gets another's context

    iface.register(BROKEN_ATTENTION, broken)
    mask_iface = getattr(transformers, "AttentionMaskInterface", None)
    if mask_iface is not None:  # without a mask function, 4.57+ silently pass attention_mask=None
        from transformers.masking_utils import sdpa_mask

        mask_iface.register(BROKEN_ATTENTION, sdpa_mask)
    return None


# ---- measurements --------------------------------------------------------------------------------


def autocast(device: torch.device) -> Any:
    """Mixed precision as trainers do it: fp32 master weights, bf16/fp16 compute."""
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[ARGS.dtype]
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def parity_check(attn: str, tokenizer: Any, state: dict[str, torch.Tensor], device: torch.device) -> dict[str, Any]:
    """Logits of (attn, dtype) vs an fp32 eager reference on a left-padded batch, judged against the
    same-dtype eager error (flash-attn's own test method): within when err <= 2 * baseline + 1e-5."""
    batch = tokenizer(PARITY_TEXTS, return_tensors="pt", padding=True).to(device)
    keep = batch["attention_mask"].bool()

    def logits(impl: str, mixed: bool) -> torch.Tensor:
        model = build_model(impl, tokenizer, state).to(device).eval()
        with torch.no_grad(), autocast(device) if mixed else torch.autocast(device.type, enabled=False):
            out: torch.Tensor = model(**batch).logits.float()
        return out[keep]

    ref = logits("eager", mixed=False)
    test = logits(attn, mixed=True)
    base = logits("eager", mixed=True)
    norm = ref.norm().item() or 1.0
    err = (test - ref).norm().item() / norm
    baseline = (base - ref).norm().item() / norm
    tolerance = 2 * baseline + 1e-5
    return {
        "implementation": attn,
        "dtype": ARGS.dtype,
        "rel_err": err,
        "baseline_rel_err": baseline,
        "tolerance": tolerance,
        "within_tolerance": bool(err <= tolerance),
        "padding_side": "left",
    }


def input_grad_hooks(model: Any) -> list[tuple[Any, Any]]:
    """The forward hooks `enable_input_require_grads` registered, wherever they are. Found on the modules
    themselves: transformers 5.x with peft registers two and keeps the handle of only the last."""
    return [
        (module, key)
        for module in model.modules()
        for key, fn in list(module._forward_hooks.items())
        if "enable_input_require_grads" in getattr(fn, "__qualname__", "")
    ]


def remove_input_grad_hooks(model: Any, hooks: list[tuple[Any, Any]]) -> None:
    """Remove every input-requires-grad hook (a control): checkpointing over frozen inputs then loses grads."""
    for module, key in hooks:
        del module._forward_hooks[key]
    for owner in model.modules():
        for attr in ("_require_grads_hook", "_require_grads_hooks"):
            if attr in owner.__dict__:
                delattr(owner, attr)


def reward_fn(text: str) -> float:
    """Deterministic rule reward: the share of letters, digits and spaces in a completion."""
    return sum(ch.isascii() and (ch.isalnum() or ch == " ") for ch in text) / max(len(text), 1)


def inject_sigfpe() -> None:
    """A real trapping integer division in torch: INT64_MIN / -1 with truncation kills the process (signal 8)."""
    torch.div(torch.tensor([-(2**63)]), -1, rounding_mode="trunc")


# ---- training ------------------------------------------------------------------------------------


def main() -> int:
    device = torch.device("cuda" if ARGS.device == "auto" and torch.cuda.is_available() else ("cpu" if ARGS.device == "auto" else ARGS.device))
    distributed = WORLD > 1
    if distributed:
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(seconds=ARGS.collective_timeout))
    RESULT["env"] = environment_facts(device)
    RESULT["stage"] = "build"
    save()

    t = time.perf_counter()
    attn = ARGS.attn
    fault_note = None
    if ARGS.fault == "broken_attention":
        fault_note = register_broken_attention()
        if fault_note is None:
            attn = BROKEN_ATTENTION
    RESULT["fault"] = {"name": ARGS.fault, "applied": ARGS.fault != "none" and fault_note is None, "note": fault_note}
    tokenizer = transformers.AutoTokenizer.from_pretrained(ARGS.model) if ARGS.model else build_tokenizer()
    tokenizer.padding_side = "left"
    model = build_model(attn, tokenizer).to(device)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    RESULT["timings"]["build_s"] = round(time.perf_counter() - t, 3)

    RESULT["stage"] = "parity"
    t = time.perf_counter()
    RESULT["parity"] = parity_check(attn, tokenizer, state, device)
    RESULT["timings"]["parity_s"] = round(time.perf_counter() - t, 3)
    save()

    if ARGS.trainer == "trl":  # TRL's GRPOTrainer instead of the loop below (probes/trl_trainer.py)
        import importlib

        trl_trainer = importlib.import_module("trl_trainer")
        return int(trl_trainer.run_trl(ARGS, model, tokenizer, OUT, RESULT, save, prompts=PROMPTS, reward=reward_fn, max_new_tokens=MAX_NEW_TOKENS))
    RESULT["stage"] = "setup"
    ref_model = build_model(attn, tokenizer, state).to(device).eval() if ARGS.beta > 0 else None
    if ARGS.freeze_embeddings:
        model.get_input_embeddings().requires_grad_(False)
    if ARGS.grad_ckpt != "off":
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": ARGS.grad_ckpt == "reentrant"})
    if ARGS.lora:
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], lora_dropout=0.0))
    hooks = input_grad_hooks(model)
    if not ARGS.input_grad_hook:
        remove_input_grad_hooks(model, hooks)
    RESULT["input_grad_hook"] = {"hooks_after_setup": len(hooks), "removed": 0 if ARGS.input_grad_hook else len(hooks)}
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    before = {n: p.detach().clone() for n, p in trainable.items()}
    got_grad: set[str] = set()
    train_model: Any = model
    if distributed:
        train_model = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=ARGS.find_unused_parameters, static_graph=ARGS.static_graph)
    optimizer = torch.optim.AdamW(list(trainable.values()), lr=ARGS.lr, weight_decay=0.0)  # no decay: "changed" means learned
    gen_config = transformers.GenerationConfig(
        do_sample=True,
        temperature=ARGS.temperature,
        top_p=ARGS.top_p,
        top_k=ARGS.top_k,
        max_new_tokens=MAX_NEW_TOKENS,
        num_return_sequences=ARGS.num_generations,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    prompts = tokenizer(PROMPTS, return_tensors="pt", padding=True).to(device)
    plen = prompts["input_ids"].shape[1]
    G = ARGS.num_generations
    RESULT.update(trainable_params=len(trainable), samples=[])
    RESULT["stage"] = "train"
    t_train = time.perf_counter()
    metrics_file = (OUT / "metrics.jsonl").open("w") if RANK == 0 else None
    for step in range(ARGS.steps):
        t_step = time.perf_counter()
        if ARGS.fault == "sigfpe" and step == 1 and RANK == WORLD - 1:
            save()
            print(f"[rank{RANK}] injecting a trapping integer division (fault sigfpe)", flush=True)
            inject_sigfpe()
        torch.manual_seed(ARGS.seed * 7919 + step * 101 + RANK)
        model.eval()
        with torch.no_grad(), autocast(device):
            seqs = model.generate(**prompts, generation_config=gen_config)
        model.train()
        completions = seqs[:, plen:]
        is_eos = completions == tokenizer.eos_token_id
        after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0
        cmask = (~after_eos).long()
        texts = tokenizer.batch_decode(completions.masked_fill(after_eos, tokenizer.pad_token_id), skip_special_tokens=True)
        rewards = torch.tensor([reward_fn(x) for x in texts], device=device).view(-1, G)
        mean = rewards.mean(1, keepdim=True)
        std = rewards.std(1, unbiased=ARGS.std == "unbiased", keepdim=True)
        adv = ((rewards - mean) / (std + 1e-4)).view(-1)

        attn_mask = torch.cat([prompts["attention_mask"].repeat_interleave(G, 0), cmask], 1)
        with autocast(device):
            logits = train_model(input_ids=seqs, attention_mask=attn_mask).logits[:, plen - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
        per_token = -torch.exp(logp - logp.detach()) * adv.unsqueeze(1)
        kl_value = None
        if ref_model is not None:
            with torch.no_grad(), autocast(device):
                ref_logits = ref_model(input_ids=seqs, attention_mask=attn_mask).logits[:, plen - 1 : -1].float()
            ref_logp = torch.log_softmax(ref_logits, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
            kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
            per_token = per_token + ARGS.beta * kl
            kl_value = ((kl * cmask).sum(1) / cmask.sum(1).clamp(min=1)).mean().item()
        loss = ((per_token * cmask).sum(1) / cmask.sum(1).clamp(min=1)).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for name, p in trainable.items():
            if p.grad is not None and bool(p.grad.ne(0).any()):
                got_grad.add(name)
        grad_norm = torch.nn.utils.clip_grad_norm_(list(trainable.values()), 1.0).item()
        optimizer.step()

        group_std = rewards.std(1, unbiased=False)
        row = {
            "step": step + 1,
            "loss": loss.item(),
            "grad_norm": grad_norm,
            "reward": rewards.mean().item(),
            "reward_std": group_std.mean().item(),
            "frac_reward_zero_std": group_std.eq(0).float().mean().item(),
            "completions/mean_length": cmask.sum(1).float().mean().item(),
            "distinct_ratio": len(set(texts)) / len(texts),
            "step_time": round(time.perf_counter() - t_step, 4),
        }
        if kl_value is not None:
            row["kl"] = kl_value
        if RESULT["first_nonfinite_step"] is None and not (math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])):
            RESULT["first_nonfinite_step"] = step + 1
        print(f"[rank{RANK}] " + json.dumps(row, allow_nan=True), flush=True)
        if metrics_file is not None:
            metrics_file.write(json.dumps(row, allow_nan=True) + "\n")
            metrics_file.flush()
        if step == 0:
            RESULT["samples"] = [repr(x) for x in texts[: 2 * G]]
        RESULT["steps_completed"] = step + 1
        RESULT.setdefault("grad_norm_first_steps", []).append(grad_norm)
        save()
    RESULT["timings"]["train_s"] = round(time.perf_counter() - t_train, 3)
    changed = [n for n, p in trainable.items() if not torch.equal(before[n], p.detach())]
    RESULT["params"] = {
        "trainable": len(trainable),
        "with_grad": len(got_grad),
        "without_grad": sorted(set(trainable) - got_grad)[:20],
        "changed": len(changed),
        "unchanged": sorted(set(trainable) - set(changed))[:20],
        "all_got_grad": len(got_grad) == len(trainable),
        "all_changed": len(changed) == len(trainable),
    }
    RESULT.update(finished=True, stage="done")
    if metrics_file is not None:
        metrics_file.close()
    if distributed:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except BaseException as exc:  # record the crash, then fail the way it would have
        RESULT["error"] = {"type": type(exc).__name__, "message": str(exc)[:4000], "stage": RESULT["stage"]}
        save()
        traceback.print_exc()
        sys.stdout.flush()
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    save()
    print(f"[rank{RANK}] probe {'finished' if RESULT['finished'] else 'did not finish'} in {RESULT['timings']['total_s']} s", flush=True)
    sys.exit(code)
