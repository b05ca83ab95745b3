"""Real-size kernels: bf16/fp16 GEMMs and one attention forward/backward at the layer shapes of common
7B-class models, each compared with fp32 on the same (rounded) inputs. The tiny model's GEMMs never reach
the cuBLAS heuristics that misfire at these sizes (the SIGFPE on H20 with old cuBLAS).

Before each shape the caller is told which one runs, so a process that dies mid-kernel leaves the shape
in result.json. On CPU the shapes are divided by REDUCE so the stage is testable without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LayerShape:
    """A model's per-layer sizes (from its published config.json)."""

    model: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int


SHAPES = (
    LayerShape("Qwen2.5-7B", 3584, 18944, 28, 4, 128),
    LayerShape("Llama-3-8B", 4096, 14336, 32, 8, 128),
    LayerShape("Gemma-2-9B", 3584, 14336, 16, 8, 256),
)
SEQ_LENS = (512, 2048, 4096)
REDUCE = 16  # CPU: hidden, intermediate and sequence divided by this; heads by 4; head_dim kept
TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3}  # relative Frobenius error vs fp32; measured ~4e-3 / 5e-4 when healthy
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def scaled(shape: LayerShape, reduce: int) -> LayerShape:
    if reduce == 1:
        return shape
    return LayerShape(shape.model, shape.hidden // reduce, shape.intermediate // reduce, max(1, shape.heads // 4), max(1, shape.kv_heads // 4), shape.head_dim)


def gemms(s: LayerShape) -> dict[str, tuple[int, int]]:
    """(in, out) features of the layer's projections."""
    return {
        "qkv_proj": (s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim),
        "o_proj": (s.heads * s.head_dim, s.hidden),
        "gate_up_proj": (s.hidden, 2 * s.intermediate),
        "down_proj": (s.intermediate, s.hidden),
    }


def rel_err(test: torch.Tensor, ref: torch.Tensor) -> float:
    return float((test.float() - ref).norm() / (ref.norm() + 1e-30))


@dataclass(frozen=True)
class Check:
    """One kernel call to run: its label and a function returning (low-precision outputs, fp32 references)."""

    label: dict[str, Any]
    run: Callable[[], tuple[list[torch.Tensor], list[torch.Tensor]]]


def gemm_check(model: str, name: str, seq: int, fin: int, fout: int, dtype: str, device: torch.device, gen: torch.Generator) -> Check:
    def run() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        x = (torch.randn(seq, fin, generator=gen, device=device) / fin**0.5).to(DTYPES[dtype])
        w = torch.randn(fout, fin, generator=gen, device=device).to(DTYPES[dtype])
        return [x @ w.t()], [x.float() @ w.float().t()]

    return Check({"model": model, "op": name, "dtype": dtype, "m": seq, "k": fin, "n": fout}, run)


def attention_check(s: LayerShape, seq: int, dtype: str, device: torch.device, gen: torch.Generator) -> Check:
    """Causal sdpa forward and backward (GQA expanded), outputs and q/k/v grads vs fp32."""

    def run() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        q = torch.randn(1, s.heads, seq, s.head_dim, generator=gen, device=device)
        k = torch.randn(1, s.kv_heads, seq, s.head_dim, generator=gen, device=device).repeat_interleave(s.heads // s.kv_heads, 1)
        v = torch.randn(1, s.kv_heads, seq, s.head_dim, generator=gen, device=device).repeat_interleave(s.heads // s.kv_heads, 1)
        grad = torch.randn(1, s.heads, seq, s.head_dim, generator=gen, device=device)
        outs = []
        for dt in (DTYPES[dtype], torch.float32):
            leaves = [t.to(DTYPES[dtype]).to(dt).requires_grad_(True) for t in (q, k, v)]
            out = F.scaled_dot_product_attention(leaves[0], leaves[1], leaves[2], is_causal=True)
            out.backward(grad.to(dt))
            outs.append([out.detach(), *[t.grad for t in leaves if t.grad is not None]])
        return outs[0], [t.float() for t in outs[1]]

    return Check({"model": s.model, "op": "sdpa_fwd_bwd", "dtype": dtype, "seq": seq, "heads": s.heads, "head_dim": s.head_dim}, run)


def checks(device: torch.device, reduce: int, dtypes: tuple[str, ...], seed: int = 0) -> Iterator[Check]:
    gen = torch.Generator(device=device).manual_seed(seed)
    for shape in SHAPES:
        s = scaled(shape, reduce)
        for seq in (n // reduce for n in SEQ_LENS):
            for dtype in dtypes:
                for name, (fin, fout) in gemms(s).items():
                    yield gemm_check(s.model, name, seq, fin, fout, dtype, device, gen)
                yield attention_check(s, seq, dtype, device, gen)


def judge(check: Check) -> tuple[float | None, dict[str, Any] | None]:
    """(relative error, failure): no failure when the call is finite and within tolerance."""
    try:
        got, ref = check.run()
    except Exception as exc:  # a kernel that raises is a finding about the stack, not a probe bug
        return None, {**check.label, "problem": "raised", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    if not all(bool(torch.isfinite(t).all()) for t in got):
        return None, {**check.label, "problem": "non_finite"}
    err = max(rel_err(g, r) for g, r in zip(got, ref, strict=True))
    tolerance = TOLERANCE[check.label["dtype"]]
    return err, ({**check.label, "problem": "mismatch", "rel_err": err, "tolerance": tolerance} if err > tolerance else None)


def run_stage(device: torch.device, mode: str, before_each: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Every check in turn; `before_each` persists the label so a crash names its shape."""
    reduce = 1 if mode == "full" or (mode == "auto" and device.type == "cuda") else REDUCE
    dtypes = ("bf16", "fp16")
    failures: list[dict[str, Any]] = []
    worst: dict[str, float] = {}
    n = 0
    for check in checks(device, reduce, dtypes):
        before_each(check.label)
        err, failure = judge(check)
        n += 1
        if failure is not None:
            failures.append(failure)
        if err is not None:
            key = f"{check.label['op'].split('_fwd')[0] if 'sdpa' in check.label['op'] else 'gemm'}/{check.label['dtype']}"
            worst[key] = max(worst.get(key, 0.0), err)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {"scale": "full" if reduce == 1 else f"reduced/{reduce}", "checked": n, "failures": failures, "dtypes": list(dtypes), "worst": worst}
