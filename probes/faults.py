"""Known failures injected into the real code path (the controls), and the input-requires-grad hooks
a control removes."""

from __future__ import annotations

from typing import Any

import torch
import transformers

BROKEN_ATTENTION = "envmatrix_broken"
NO_SOFTCAP_ATTENTION = "envmatrix_no_softcap"


def register_broken_attention() -> str | None:
    """Register a deliberately wrong attention kernel (sequence order reversed); a note when unsupported."""
    iface = getattr(transformers, "AttentionInterface", None)
    if iface is None:
        return f"transformers {transformers.__version__} has no attention registry (AttentionInterface arrived in 4.48)"
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def broken(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, **kwargs: Any) -> Any:
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return out.flip(1), weights  # (batch, seq, heads, dim): every position gets another's context

    iface.register(BROKEN_ATTENTION, broken)
    register_sdpa_mask(BROKEN_ATTENTION)
    return None


def register_no_softcap_attention() -> str | None:
    """Register sdpa with the softcap dropped (what an implementation that ignores Gemma-2's cap computes)."""
    iface = getattr(transformers, "AttentionInterface", None)
    if iface is None:
        return f"transformers {transformers.__version__} has no attention registry (AttentionInterface arrived in 4.48)"
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    def no_softcap(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any, **kwargs: Any) -> Any:
        kwargs.pop("softcap", None)
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    iface.register(NO_SOFTCAP_ATTENTION, no_softcap)
    register_sdpa_mask(NO_SOFTCAP_ATTENTION)
    return None


FAULT_ATTENTION = {"broken_attention": (BROKEN_ATTENTION, register_broken_attention), "no_softcap": (NO_SOFTCAP_ATTENTION, register_no_softcap_attention)}


def register_sdpa_mask(name: str) -> None:
    """Give a registered attention `name` sdpa's mask: without one, 4.57+ silently pass attention_mask=None."""
    mask_iface = getattr(transformers, "AttentionMaskInterface", None)
    if mask_iface is not None:
        from transformers.masking_utils import sdpa_mask

        mask_iface.register(name, sdpa_mask)


def inject_sigfpe() -> None:
    """A real trapping integer division in torch: INT64_MIN / -1 with truncation kills the process (signal 8)."""
    torch.div(torch.tensor([-(2**63)]), -1, rounding_mode="trunc")


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
