"""The numeric fingerprint: what this stack computes on inputs every environment shares, so two environments'
numbers can be compared (envmatrix/outputs/drift.py compares them; the probe only measures).

Nothing here may depend on the torch or transformers release except the arithmetic under test:
- the weights are drawn from SHAKE-256 of (parameter name, shape), never from torch's generator or a model's
  init (`reference_weights`); a name is read without the `model.` / `language_model.` wrappers releases add;
- the prompts and completions are fixed text, teacher-forced (no sampling), with fixed rewards;
- the update is plain SGD written here (an optimizer's release cannot move it).

It measures, on a fresh model of the cell's family, attention and dtype: the completions' per-token
log-probabilities (digest, max/mean |value|, located samples), the GRPO loss and the gradient norm per
parameter group at step 0, and the loss, mean NLL and gradient norm of the first STEPS SGD steps; for bf16/fp16,
the same log-probabilities in fp32, whose distance is the precision's own noise (the comparison's floor).
Cheap by design: 8 sequences of about 20 tokens on the tiny model, a few milliseconds a step on a CPU.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
import transformers

from probes import families, grpo, parity

FINGERPRINT_VERSION = "1"
#: Teacher-forced completions, two per prompt (train.PROMPTS' order), whose rewards differ inside each group.
COMPLETIONS = (" 5", " five!!", " blue", " blue #1", " hi there", " hi?!", " 1, 2, 3", " one two three")
GROUP = 2
STEPS = 3
LR = 0.01
#: Log-probabilities kept as located samples (every one on the tiny families; evenly spaced beyond).
MAX_SAMPLES = 96
#: Scalars of the model's config kept, so a comparison can name a changed default.
MAX_CONFIG_KEYS = 120
#: The drift control: a changed default epsilon (ten times rms_norm_eps), as a release that changed it would compute.
PERTURB_EPS = 10.0
#: Reference weights: |uniform| bound for a matrix is sqrt(3 / fan_in) (std 1/sqrt(fan_in)); vectors get this noise.
VECTOR_NOISE = 0.1
WRAPPERS = ("model", "language_model", "base_model")


def canonical(name: str) -> str:
    """A parameter's name without the wrappers releases move it under (`model.language_model.layers.0...`)."""
    return ".".join(part for part in name.split(".") if part not in WRAPPERS)


def uniform(key: str, count: int) -> torch.Tensor:
    """`count` numbers in [-1, 1), the same bits on every platform and release: SHAKE-256 of `key`, read as int32."""
    raw = bytearray(hashlib.shake_256(key.encode()).digest(4 * count)) if count else bytearray(4)
    ints = torch.frombuffer(raw, dtype=torch.int32)[:count]
    return ints.double() / 2**31


def reference_tensor(name: str, shape: tuple[int, ...], base: float) -> torch.Tensor:
    """The reference value of one parameter: a matrix ~ U(+-sqrt(3/fan_in)); a vector `base` + U(+-VECTOR_NOISE)."""
    count = math.prod(shape)
    u = uniform(f"envmatrix-reference-v{FINGERPRINT_VERSION}|{canonical(name)}|{list(shape)}", count)
    values = u * math.sqrt(3.0 / max(1, math.prod(shape[1:]))) if len(shape) >= 2 else base + VECTOR_NOISE * u
    return values.float().view(shape)


def neutral(tensor: torch.Tensor) -> float:
    """A vector's neutral value as the model defines it (norms: 1, or 0 where the norm computes 1 + w; biases: 0):
    its init when that is one constant, else 0."""
    flat = tensor.detach().float().flatten()
    if flat.numel() and bool((flat == flat[0]).all()) and math.isfinite(float(flat[0])):
        return float(flat[0])
    return 0.0


def load_reference_weights(model: Any) -> str:
    """Overwrite every parameter with its reference value; the sha256 of (canonical name, shape, fp32 bytes)."""
    digest = hashlib.sha256()
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: canonical(kv[0])):
            value = reference_tensor(name, tuple(param.shape), neutral(param))
            param.copy_(value)
            digest.update(f"{canonical(name)}|{list(param.shape)}|".encode())
            digest.update(value.numpy().tobytes())
    return digest.hexdigest()


def config_scalars(model: Any) -> dict[str, Any]:
    """The text config's plain scalars (epsilons, rope settings, scales, softcaps): what a changed default shows in."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    raw = config.to_dict()
    skip = {"transformers_version", "_name_or_path", "architectures", "torch_dtype", "dtype", "id2label", "label2id"}
    skip |= set(transformers.GenerationConfig().to_dict())  # sampling settings 4.x configs still carry: not the forward's
    out: dict[str, Any] = {}
    for key in sorted(raw):
        value = raw[key]
        if key in skip or key.startswith("_") or key.endswith("_token_id"):
            continue
        if isinstance(value, (bool, int, float, str)) or value is None:
            out[key] = value if not isinstance(value, float) or math.isfinite(value) else str(value)
        elif isinstance(value, dict) and all(isinstance(v, (bool, int, float, str, type(None))) for v in value.values()):
            out[key] = ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
        if len(out) >= MAX_CONFIG_KEYS:
            break
    return out


def group_of(name: str) -> str:
    """The parameter group a gradient norm is summed over."""
    n = canonical(name)
    for group, marks in (
        ("embed", ("embed_tokens", "wte", "word_embeddings")),
        ("head", ("lm_head",)),
        ("vision", ("visual", "vision")),
        ("attention", ("attn", "attention")),
        ("mlp", ("mlp", "feed_forward")),
        ("norm", ("norm", "ln_")),
    ):
        if any(m in n for m in marks):
            return group
    return "other"


Batch = tuple[torch.Tensor, torch.Tensor, int, torch.Tensor, torch.Tensor]


def batch(tokenizer: Any, prompts: list[str], device: torch.device) -> Batch:
    """(input_ids, attention_mask, prompt length, completion ids, completion mask): left-padded prompts (each
    repeated GROUP times), right-padded completions ending in EOS, as a trainer's training forward sees them."""
    texts, templated = families.format_prompts(tokenizer, prompts)
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=not templated)
    ids, mask = enc["input_ids"].repeat_interleave(GROUP, 0), enc["attention_mask"].repeat_interleave(GROUP, 0)
    rows = [[*tokenizer(c, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id] for c in COMPLETIONS[: ids.shape[0]]]
    width = max(len(r) for r in rows)
    comp = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in rows])
    cmask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return torch.cat([ids, comp], 1).to(device), torch.cat([mask, cmask], 1).to(device), ids.shape[1], comp.to(device), cmask.to(device)


def summary(logp: torch.Tensor, mask: torch.Tensor) -> dict[str, Any]:
    """Digest (sha256 of the fp32 values under the mask), max and mean |logp|, and located samples [seq, pos, value]."""
    where = mask.bool().nonzero().tolist()
    values = logp.detach().float()[mask.bool()].cpu()
    stride = max(1, math.ceil(len(where) / MAX_SAMPLES))
    return {
        "tokens": len(where),
        "digest": hashlib.sha256(values.numpy().tobytes()).hexdigest(),
        "max_abs": float(values.abs().max()) if len(where) else 0.0,
        "mean_abs": float(values.abs().mean()) if len(where) else 0.0,
        "finite": bool(torch.isfinite(values).all()),
        "samples": [[s, p, float(values[i])] for i, (s, p) in enumerate(where) if i % stride == 0][:MAX_SAMPLES],
    }


def _num(x: float) -> float | str:
    """A JSON-safe figure (NaN and infinities as text)."""
    return x if math.isfinite(x) else str(x)


def perturb(model: Any) -> None:
    """The drift control: rms_norm_eps times PERTURB_EPS, in the config and in every norm that copied it at build."""
    text = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    text.rms_norm_eps = getattr(text, "rms_norm_eps", 1e-6) * PERTURB_EPS
    for module in model.modules():
        for attr in ("variance_epsilon", "eps"):
            if isinstance(getattr(module, attr, None), float):
                setattr(module, attr, getattr(module, attr) * PERTURB_EPS)


def measure(source: families.ModelSource, attn: str, dtype: str, tokenizer: Any, prompts: list[str], device: torch.device, fault: str) -> dict[str, Any]:
    """result.json's `fingerprint` (see the module's docstring); `fault` drift perturbs the config (the control)."""
    if source.origin in families.FAMILIES and source.path and not source.shrink:  # saved from a built-in family (gen-config)
        source = families.ModelSource(family=source.origin, path=None, seed=source.seed, vision=source.vision, head_dim=source.head_dim)
    model = families.build_model(source, attn, tokenizer)
    weights = "checkpoint" if source.path and not source.shrink else "reference"
    if fault == "drift":
        perturb(model)
    digest = load_reference_weights(model) if weights == "reference" else _checkpoint_digest(model)
    prepare = families.FAMILIES[source.family].prepare if source.family else None
    if prepare is not None:
        prepare(model)  # gemma2's softcap bite, on the reference weights
    model = model.to(device).train()
    ids, mask, plen, comp, cmask = batch(tokenizer, prompts, device)
    rewards = grpo.rewards_for([tokenizer.decode(r[m.bool()], skip_special_tokens=True) for r, m in zip(comp.cpu(), cmask.cpu(), strict=True)], GROUP, device)
    adv = grpo.advantages(rewards, "unbiased")
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def logps() -> torch.Tensor:
        with parity.autocast(device, dtype):
            logits = model(input_ids=ids, attention_mask=mask).logits[:, plen - 1 : -1]
        return grpo.token_logps(logits, comp)

    out: dict[str, Any] = {
        "version": FINGERPRINT_VERSION,
        "dtype": dtype,
        "device": device.type,
        "attn": getattr(model.config, "_attn_implementation", attn),
        "family": source.label,
        "weights": weights,
        "weights_digest": digest,
        "config": config_scalars(model),
        "steps": [],
    }
    old: torch.Tensor | None = None
    for step in range(STEPS):
        logp = logps()
        if old is None:
            old = logp.detach()
            out["logp"] = summary(logp, cmask)
            if dtype != "fp32":  # the precision's own noise: the same forward in fp32
                with torch.no_grad(), torch.autocast(device.type, enabled=False):
                    full = grpo.token_logps(model(input_ids=ids, attention_mask=mask).logits[:, plen - 1 : -1], comp)
                out["noise"] = {"logp_vs_fp32": float((full - logp.detach()).abs()[cmask.bool()].max())}
        loss = grpo.masked_mean(-torch.exp(logp - old) * adv.unsqueeze(1), cmask)
        nll = grpo.masked_mean(-logp.detach(), cmask)
        model.zero_grad(set_to_none=True)
        loss.backward()
        norms: dict[str, float] = {}
        for name, p in params:
            if p.grad is not None:
                g = group_of(name)
                norms[g] = norms.get(g, 0.0) + float(p.grad.detach().float().pow(2).sum())
        total = math.sqrt(sum(norms.values()))
        row: dict[str, Any] = {"step": step, "loss": _num(float(loss.detach())), "nll": _num(float(nll)), "grad_norm": _num(total)}
        if step == 0:
            row["grad_norm_groups"] = {g: _num(math.sqrt(v)) for g, v in sorted(norms.items())}
        out["steps"].append(row)
        with torch.no_grad():
            for _, p in params:
                if p.grad is not None:
                    p.sub_(LR * p.grad)
    return out


def _checkpoint_digest(model: Any) -> str:
    """A user's checkpoint keeps its own weights (fixed files, whatever the release): their sha256."""
    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters(), key=lambda kv: canonical(kv[0])):
        digest.update(f"{canonical(name)}|{list(param.shape)}|".encode())
        digest.update(param.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()
