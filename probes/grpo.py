"""GRPO's arithmetic as small pure functions over tensors: completion masks, rewards, group advantages,
the clipped-free policy-gradient loss with an optional k3 KL, the metrics row and the step bookkeeping.

Kept apart from the model and the loop so each piece is tested on tiny tensors (tests/unit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

STD_MODES = ("biased", "unbiased")
ADV_EPS = 1e-4


@dataclass(frozen=True)
class Samples:
    """What one sampling round produced: the full sequences, the completion part and its mask, the texts."""

    sequences: torch.Tensor
    completions: torch.Tensor
    mask: torch.Tensor
    texts: list[str]


def completion_mask(completions: torch.Tensor, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mask, after_eos): mask keeps tokens up to and including the first EOS; after_eos is the rest."""
    is_eos = completions == eos_id
    after_eos = (is_eos.cumsum(1) - is_eos.long()) > 0
    return (~after_eos).long(), after_eos


def split_samples(sequences: torch.Tensor, prompt_len: int, eos_id: int, pad_id: int, decode: Callable[[torch.Tensor], list[str]]) -> Samples:
    """Cut generated sequences into completions, mask what follows EOS, decode the visible text."""
    completions = sequences[:, prompt_len:]
    mask, after_eos = completion_mask(completions, eos_id)
    texts = decode(completions.masked_fill(after_eos, pad_id))
    return Samples(sequences=sequences, completions=completions, mask=mask, texts=texts)


def reward_fn(text: str) -> float:
    """Deterministic rule reward: the share of letters, digits and spaces in a completion."""
    return sum(ch.isascii() and (ch.isalnum() or ch == " ") for ch in text) / max(len(text), 1)


def rewards_for(texts: list[str], group: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Rewards as (prompts, generations): row i holds prompt i's group."""
    return torch.tensor([reward_fn(x) for x in texts], device=device, dtype=torch.float32).view(-1, group)


def advantages(rewards: torch.Tensor, std: str) -> torch.Tensor:
    """Group-normalised advantages, flattened. `unbiased` (TRL's) divides by n-1: NaN for groups of one."""
    if std not in STD_MODES:
        raise ValueError(f"std must be one of {STD_MODES}, got {std!r}")
    mean = rewards.mean(1, keepdim=True)
    spread = rewards.std(1, unbiased=std == "unbiased", keepdim=True)
    return ((rewards - mean) / (spread + ADV_EPS)).view(-1)


def token_logps(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of `tokens` (batch, len) under `logits` (batch, len, vocab), in fp32."""
    return torch.log_softmax(logits.float(), -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(policy || reference), per token: exp(r) - r - 1 with r = ref - policy."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence mean over the mask, then the batch mean (TRL's per-sequence normalisation)."""
    return ((values * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()


def grpo_loss(
    logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, beta: float = 0.0, ref_logp: torch.Tensor | None = None
) -> tuple[torch.Tensor, float | None]:
    """(loss, mean KL or None): -exp(logp - logp.detach()) * A per token (value -A, gradient -A * dlogp), + beta * k3."""
    per_token = -torch.exp(logp - logp.detach()) * adv.unsqueeze(1)
    kl_value = None
    if ref_logp is not None:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
        kl_value = masked_mean(kl.detach(), mask).item()
    return masked_mean(per_token, mask), kl_value


def diversity(texts: list[str]) -> float:
    """Share of distinct completions: 1/len when sampling collapsed to greedy."""
    return len(set(texts)) / max(len(texts), 1)


def metrics_row(
    step: int, loss: float, grad_norm: float, rewards: torch.Tensor, mask: torch.Tensor, texts: list[str], step_time: float, kl: float | None
) -> dict[str, Any]:
    """One metrics.jsonl line, with the names TRL users know (reward_std is the biased per-group std)."""
    group_std = rewards.std(1, unbiased=False)
    row: dict[str, Any] = {
        "step": step,
        "loss": loss,
        "grad_norm": grad_norm,
        "reward": rewards.mean().item(),
        "reward_std": group_std.mean().item(),
        "frac_reward_zero_std": group_std.eq(0).float().mean().item(),
        "completions/mean_length": mask.sum(1).float().mean().item(),
        "distinct_ratio": diversity(texts),
        "step_time": round(step_time, 4),
    }
    if kl is not None:
        row["kl"] = kl
    return row


@dataclass
class StepBook:
    """What the run learned across steps: which parameters ever got a gradient, the first non-finite step."""

    before: dict[str, torch.Tensor]
    got_grad: set[str] = field(default_factory=set)
    first_nonfinite_step: int | None = None
    grad_norms: list[float] = field(default_factory=list)

    @classmethod
    def start(cls, trainable: Mapping[str, torch.Tensor]) -> StepBook:
        return cls(before={n: p.detach().clone() for n, p in trainable.items()})

    def note_grads(self, grads: Mapping[str, torch.Tensor | None]) -> None:
        """Remember parameters whose (whole) gradient has a non-zero entry (after backward, before clipping)."""
        for name, grad in grads.items():
            if grad is not None and bool(grad.ne(0).any()):
                self.got_grad.add(name)

    def note_row(self, row: Mapping[str, Any]) -> None:
        self.grad_norms.append(float(row["grad_norm"]))
        if self.first_nonfinite_step is None and not (math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])):
            self.first_nonfinite_step = int(row["step"])

    def params_summary(self, trainable: Mapping[str, torch.Tensor], limit: int = 20) -> dict[str, Any]:
        """result.json's `params`: got a gradient, changed (the TRL tiny-model test's criterion)."""
        changed = {n for n, p in trainable.items() if not torch.equal(self.before[n], p.detach())}  # whole values under sharding
        names = set(trainable)
        return {
            "trainable": len(names),
            "with_grad": len(self.got_grad & names),
            "without_grad": sorted(names - self.got_grad)[:limit],
            "changed": len(changed),
            "unchanged": sorted(names - changed)[:limit],
            "all_got_grad": self.got_grad >= names,
            "all_changed": changed == names,
        }
