"""Attention parity: logits of (implementation, dtype) vs an fp32 eager reference on the same weights and
a left-padded batch, judged against the same-dtype eager error (flash-attn's own test method)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from probes import families

PARITY_TEXTS = ["The quick brown fox jumps", "Hi", "GRPO smoke test, left padded batch", "0123"]


def autocast(device: torch.device, dtype: str) -> Any:
    """Mixed precision as trainers do it: fp32 master weights, bf16/fp16 compute."""
    torch_dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    return torch.autocast(device.type, dtype=torch_dtype, enabled=torch_dtype is not None)


def verdict(ref: torch.Tensor, test: torch.Tensor, base: torch.Tensor) -> dict[str, Any]:
    """Relative errors of `test` and `base` (same-dtype eager) against `ref`; within when err <= 2 * baseline + 1e-5."""
    norm = ref.norm().item() or 1.0
    err = (test - ref).norm().item() / norm
    baseline = (base - ref).norm().item() / norm
    tolerance = 2 * baseline + 1e-5
    return {"rel_err": err, "baseline_rel_err": baseline, "tolerance": tolerance, "within_tolerance": bool(err <= tolerance)}


def compare(logits: Callable[[str, bool], torch.Tensor], attn: str, dtype: str) -> dict[str, Any]:
    """Run the three forwards (`logits(impl, mixed)` returns the kept positions' fp32 logits) and judge."""
    ref = logits("eager", False)
    test = logits(attn, True)
    base = logits("eager", True)
    return {"implementation": attn, "dtype": dtype, **verdict(ref, test, base), "padding_side": "left"}


def model_parity(
    source: families.ModelSource,
    attn: str,
    dtype: str,
    tokenizer: Any,
    state: dict[str, torch.Tensor],
    device: torch.device,
    image_batch: dict[str, torch.Tensor] | None = None,
) -> dict[str, Any]:
    """Parity of the text path on PARITY_TEXTS and, for a VLM, of the image path (image tokens included);
    the worst path's figures are the verdict's, each path's are under `paths`. Padded positions are not compared."""
    batches = {"text": dict(tokenizer(PARITY_TEXTS, return_tensors="pt", padding=True))}
    if image_batch is not None:
        batches["image"] = image_batch
    models: dict[str, Any] = {}

    def path_logits(batch: dict[str, torch.Tensor]) -> Callable[[str, bool], torch.Tensor]:
        on_device = {k: v.to(device) for k, v in batch.items()}
        keep = on_device["attention_mask"].bool()

        def logits(impl: str, mixed: bool) -> torch.Tensor:
            if impl not in models:
                models[impl] = families.build_model(source, impl, tokenizer, state).to(device).eval()
            with torch.no_grad(), autocast(device, dtype) if mixed else torch.autocast(device.type, enabled=False):
                out: torch.Tensor = models[impl](**on_device).logits.float()
            return out[keep]

        return logits

    paths = {name: compare(path_logits(batch), attn, dtype) for name, batch in batches.items()}
    worst = max(paths, key=lambda n: (not paths[n]["within_tolerance"], paths[n]["rel_err"] - paths[n]["tolerance"]))
    return {
        **paths[worst],
        "family": source.label,
        "path": worst,
        "within_tolerance": all(p["within_tolerance"] for p in paths.values()),
        "paths": {name: {k: p[k] for k in ("rel_err", "baseline_rel_err", "tolerance", "within_tolerance")} for name, p in paths.items()},
    }
