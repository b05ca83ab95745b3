"""Pure: does each environment compute the numbers the reference environment computes? THE comparison of the
probe's numeric fingerprints (records/probe_result.Fingerprint), and the tolerance each is compared at.

Every environment of a profile runs the same fingerprint pass (probes/fingerprint.py): reference weights drawn
from the parameter names, fixed teacher-forced completions, a fixed SGD update. So two fingerprints of one model,
dtype and attention implementation differ only by what the stacks compute. Each compared cell is set against
the reference environment's cell of its scenario (or, where the scenario did not run there, of the same
model, dtype and attention), quantity by quantity in the order the numbers are computed: the weights, the
step-0 log-probabilities, the step-0 loss and gradient norms (per parameter group), then each SGD step's loss,
NLL and gradient norm. The first beyond tolerance is the drift's quantity and step.

Drift is a finding beside the outcome table's classes: a drifting cell keeps its outcome and its vetting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..records.outcomes import Outcome
from ..records.probe_result import Fingerprint
from ..records.record import DRIFT_FAULT, Record, Status
from .findings import version_order

#: The fault a drift control injects (probes/fingerprint.PERTURB_EPS: rms_norm_eps x 10).
CONTROL_FAULT = DRIFT_FAULT


@dataclass(frozen=True)
class Tolerance:
    """How far two fingerprints may be apart and still agree: `logp` and `loss` absolute (log-probabilities,
    loss and NLL), `grad` relative (gradient norms). `why` says where the figures come from."""

    logp: float
    loss: float
    grad: float
    why: str

    def widened(self, noise: float) -> Tolerance:
        """At least twice the precision's own noise (the same forward in fp32), measured on both sides."""
        if noise * 2 <= self.logp:
            return self
        scale = noise * 2 / self.logp
        return Tolerance(noise * 2, self.loss * scale, self.grad * scale, f"{self.why}; widened to 2 x the measured bf16/fp16-vs-fp32 noise {noise:.1e}")


#: (dtype, device kind) → tolerance. fp32 on CPU: same inputs, different releases' kernels; measured apart by at
#: most 2e-6 (sdpa vs eager, torch 2.13, docs/drift.md), so 1e-4 leaves 50x room and still sees an epsilon
#: changed tenfold (6e-4). On GPUs fp32 matmuls may run in TF32 and reductions in another order: 2e-3.
#: bf16/fp16: a stack's rounding alone moves log-probabilities by its noise (measured per run and widened to
#: twice it; 3.4e-2 for bf16 on the tiny qwen2), never below these floors.
TOLERANCES: Mapping[tuple[str, str], Tolerance] = {
    ("fp32", "cpu"): Tolerance(1e-4, 1e-4, 1e-3, "fp32 on CPU"),
    ("fp32", "cuda"): Tolerance(2e-3, 2e-3, 1e-2, "fp32 on GPU (TF32, reduction order)"),
    ("bf16", "cpu"): Tolerance(5e-2, 2e-2, 5e-2, "bf16 autocast on CPU"),
    ("bf16", "cuda"): Tolerance(1e-1, 5e-2, 1e-1, "bf16 autocast on GPU"),
    ("fp16", "cpu"): Tolerance(2e-2, 1e-2, 3e-2, "fp16 autocast on CPU"),
    ("fp16", "cuda"): Tolerance(5e-2, 2e-2, 5e-2, "fp16 autocast on GPU"),
}
LOOSEST = TOLERANCES[("bf16", "cuda")]


def tolerance(a: Fingerprint, b: Fingerprint) -> Tolerance:
    """The looser of the two sides' (dtype, device) tolerances, widened to twice either side's measured noise."""
    tols = [TOLERANCES.get((f.dtype or "", f.device or ""), LOOSEST) for f in (a, b)]
    tol = max(tols, key=lambda t: t.logp)
    noise = max((f.noise.logp_vs_fp32 or 0.0) for f in (a, b) if f.noise) if (a.noise or b.noise) else 0.0
    return tol.widened(noise)


@dataclass(frozen=True)
class Difference:
    """One quantity at one step: its size (absolute, or relative for gradient norms) and the tolerance it passed or not."""

    quantity: str  # weights, tokens, logp, loss, nll, grad_norm, grad_norm[attention], ...
    step: int
    size: float
    tolerance: float
    where: str = ""  # a located log-probability: `sequence 3, position 5`

    @property
    def beyond(self) -> bool:
        return not self.size <= self.tolerance  # NaN is beyond

    @property
    def text(self) -> str:
        at = f", {self.where}" if self.where else ""
        if math.isinf(self.size):  # not a size: the inputs themselves differ (weights, tokens)
            return f"{self.quantity} differ (step {self.step}{at})"
        kind = "relative" if self.quantity.startswith("grad_norm") else "away"
        return f"{self.quantity} {self.size:.1e} {kind} (step {self.step}{at}; tolerance {self.tolerance:.0e})"


def _num(value: float | str | None) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value) if value is not None else math.nan
    except ValueError:
        return math.nan


def _same(a: float, b: float) -> bool:
    """Equal, or both NaN: two stacks that compute the same non-finite number agree on it."""
    return a == b or (math.isnan(a) and math.isnan(b))


def _abs(a: float, b: float) -> float:
    return 0.0 if _same(a, b) else abs(a - b)


def _rel(a: float, b: float) -> float:
    if _same(a, b):
        return 0.0
    return abs(a - b) / max(abs(b), 1e-12)


def _located(sample: tuple[float, ...]) -> tuple[int, int] | None:
    """A sample's (sequence, position), or None for one that is not [whole, whole, value] (a damaged record)."""
    if len(sample) != 3 or not all(math.isfinite(x) and x == int(x) for x in sample[:2]):
        return None
    return int(sample[0]), int(sample[1])


def differences(ref: Fingerprint, other: Fingerprint, tol: Tolerance) -> list[Difference]:
    """Every compared quantity in the order the numbers are computed (the first beyond tolerance is the drift)."""
    out: list[Difference] = []
    if ref.weights_digest != other.weights_digest:
        out.append(Difference("weights", 0, math.inf, 0.0, "the reference weights differ: a parameter's name or shape changed"))
    rl, ol = ref.logp, other.logp
    if rl is not None and ol is not None:
        if rl.tokens != ol.tokens:
            out.append(Difference("tokens", 0, math.inf, 0.0, f"{ol.tokens} completion tokens here, {rl.tokens} in the reference"))
        elif rl.digest == ol.digest:
            out.append(Difference("logp", 0, 0.0, tol.logp))
        else:
            theirs = {key: s[2] for s in ol.samples if (key := _located(s)) is not None}
            worst, where = 0.0, ""
            for s in rl.samples:
                if (key := _located(s)) is None or key not in theirs:
                    continue
                size = abs(theirs[key] - s[2])
                if not size <= worst:
                    worst, where = size, f"sequence {key[0]}, position {key[1]}"
            if not math.isfinite(_num(ol.max_abs)):
                worst = math.inf
            out.append(Difference("logp", 0, worst, tol.logp, where))
    for rs, os_ in zip(ref.steps, other.steps, strict=False):
        step = rs.step if rs.step is not None else 0
        for name in ("loss", "nll"):
            if step == 0 and name == "nll":
                continue  # at step 0 the NLL is the log-probabilities again
            out.append(Difference(name, step, _abs(_num(getattr(os_, name)), _num(getattr(rs, name))), tol.loss))
        out.append(Difference("grad_norm", step, _rel(_num(os_.grad_norm), _num(rs.grad_norm)), tol.grad))
        for group in sorted(set(rs.grad_norm_groups) | set(os_.grad_norm_groups)):
            size = _rel(_num(os_.grad_norm_groups.get(group)), _num(rs.grad_norm_groups.get(group)))
            out.append(Difference(f"grad_norm[{group}]", step, size, tol.grad))
    return out


@dataclass(frozen=True)
class Comparison:
    """One cell's fingerprint against its reference cell's."""

    record: Record
    reference: Record
    tolerance: Tolerance
    diffs: tuple[Difference, ...]
    changed: tuple[str, ...] = ()  # what differs between the two sides: axes, config values, attention
    control: bool = False  # a drift control (fault drift): it must drift

    @property
    def first(self) -> Difference | None:
        """The first quantity beyond tolerance, in computing order."""
        return next((d for d in self.diffs if d.beyond), None)

    @property
    def drifts(self) -> bool:
        return self.first is not None

    @property
    def worst(self) -> dict[str, float]:
        """The largest size of each kind of quantity (logp, loss, nll, grad_norm): the no-false-drift figures."""
        out: dict[str, float] = {}
        for d in self.diffs:
            kind = d.quantity.split("[")[0]
            if kind in ("logp", "loss", "nll", "grad_norm") and not d.size <= out.get(kind, -1.0):
                out[kind] = d.size
        return out

    @property
    def later(self) -> Difference | None:
        """The first step after 0 where the loss or NLL curve leaves the reference's."""
        return next((d for d in self.diffs if d.step > 0 and d.quantity in ("loss", "nll") and d.beyond), None)

    @property
    def text(self) -> str:
        """`fp32-sdpa on <env>: numbers differ from <reference env> from step 0: logp 3.1e-01 away (step 0, …; tolerance
        1e-04); its nll curve leaves it at step 2; what differs: …`, or how close it agrees (`brief`, in detail)."""
        fp = self.record.fingerprint
        label = f"{fp.family} {fp.dtype} {fp.attn} on {fp.device}" if fp else ""
        return f"{self.record.cell.scenario} on {self.record.env}: {brief(self, self.reference.env, detail=True)} ({label})"


def _values(r: Record) -> dict[str, str]:
    return {**r.cell.axes(), **r.cell.packages}


def changed(ref: Record, other: Record) -> tuple[str, ...]:
    """What differs between the sides, as facts: the axes (`transformers 4.51.3 → 5.23.0`), the config's values
    (a changed default), the attention implementation that ran, the injected fault."""
    out: list[str] = []
    a, b = _values(ref), _values(other)
    axes = [f"{k} {a.get(k, 'none')} → {b.get(k, 'none')}" for k in dict.fromkeys([*a, *b]) if a.get(k, "none") != b.get(k, "none")]
    if axes:
        out.append(", ".join(axes))
    fa, fb = ref.fingerprint, other.fingerprint
    if fa is not None and fb is not None:
        both = sorted(k for k in set(fa.config) & set(fb.config) if not k.startswith("_") and fa.config[k] != fb.config[k])
        config = [f"{k} {_shown(fa.config[k])} → {_shown(fb.config[k])}" for k in both]
        one_side = sorted(k for k in set(fa.config) ^ set(fb.config) if not k.startswith("_"))
        if config:
            out.append("config " + ", ".join(config[:6]) + (" …" if len(config) > 6 else ""))
        if one_side:  # a release that dropped or added attributes (transformers 5 moved the generation ones out)
            out.append(f"{len(one_side)} config keys on one side only ({', '.join(one_side[:3])}{' …' if len(one_side) > 3 else ''})")
        if fa.attn != fb.attn:
            out.append(f"attention {fa.attn} → {fb.attn}")
    fault = other.cell.scenario_settings.get("fault")
    if fault and fault != "none":
        out.append(f"fault {fault} injected")
    return tuple(out)


def _shown(value: object) -> str:
    """A config value in a message: floats to 3 significant digits (1e-05, not 9.999999999999999e-06)."""
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def usable(r: Record) -> bool:
    """A cell that ran and whose fingerprint holds numbers."""
    return _usable(r)


def _usable(r: Record) -> bool:
    fp = r.fingerprint
    return r.status not in (Status.SKIPPED, Status.COVERED) and fp is not None and fp.error is None and fp.logp is not None


#: A scenario's settings that make a cell less plain as a stand-in reference (the fingerprint ignores them; a reader need not).
_PLAIN = {"world_size": 1, "lora": False, "grad_ckpt": "off", "freeze_embeddings": False, "saved_gen_config": "none", "kernels": "off", "trainer": "builtin"}


def _plainest(r: Record) -> tuple[int, str]:
    """Order a reference environment's cells plainest first (single process, no LoRA, no checkpointing, ...)."""
    settings = r.cell.scenario_settings
    return sum(settings.get(k, v) != v for k, v in _PLAIN.items()), r.cell.scenario


def compared(r: Record) -> bool:
    """A cell whose numbers are compared: a scenario without `expect` and without a fault, or a drift control."""
    return not r.expect and r.fault in ("none", CONTROL_FAULT)


def key(r: Record) -> tuple[str, ...]:
    """What must be equal for two fingerprints to be comparable: the model, dtype, attention, device kind, and
    the vLLM cells' widened heads."""
    fp = r.fingerprint
    assert fp is not None
    return (fp.family or "", fp.dtype or "", fp.attn or "", fp.device or "", str(bool(r.cell.scenario_settings.get("use_vllm"))))


def reference_env(records: Iterable[Record]) -> str | None:
    """The profile's base environment: the one with the fewest packages installed, then the oldest releases."""
    envs: dict[str, Record] = {}
    for r in records:
        if _usable(r):
            envs.setdefault(r.env, r)

    def order(r: Record) -> tuple[Any, ...]:
        values = _values(r)
        extra = sum(v != "none" for v in r.cell.packages.values())
        return (extra, [version_order(values[k]) for k in sorted(values)], r.env)

    return min(envs.values(), key=order).env if envs else None


@dataclass(frozen=True)
class DriftReport:
    """Every compared cell against the reference environment of its GPU type, and the drift controls."""

    references: tuple[str, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    without: tuple[str, ...] = field(default=())  # compared cells with no reference to set them against

    @property
    def drifting(self) -> tuple[Comparison, ...]:
        return tuple(c for c in self.comparisons if c.drifts and not c.control)

    @property
    def controls(self) -> tuple[Comparison, ...]:
        return tuple(c for c in self.comparisons if c.control)

    @property
    def controls_missed(self) -> tuple[Comparison, ...]:
        return tuple(c for c in self.controls if not c.drifts)

    @property
    def agreeing(self) -> tuple[Comparison, ...]:
        return tuple(c for c in self.comparisons if not c.drifts and not c.control)

    @property
    def text(self) -> str:
        """One line: `drift against <env>: 2 of 40 compared cells differ; drift control found in 3/3`."""
        if not self.references:
            return "drift: no fingerprints to compare"
        plain = [c for c in self.comparisons if not c.control]
        parts = [f"drift against {', '.join(self.references)}: {len(self.drifting)} of {len(plain)} compared cells differ"]
        if self.controls:
            found = len(self.controls) - len(self.controls_missed)
            parts.append(f"drift control found in {found}/{len(self.controls)}")
        return "; ".join(parts)


def compare(reference: Record, record: Record) -> Comparison:
    """One cell against its reference cell (both with fingerprints)."""
    ref_fp, fp = reference.fingerprint, record.fingerprint
    assert ref_fp is not None and fp is not None
    tol = tolerance(ref_fp, fp)
    return Comparison(record, reference, tol, tuple(differences(ref_fp, fp, tol)), changed(reference, record), record.fault == CONTROL_FAULT)


def report(records: Iterable[Record], reference: str | None = None) -> DriftReport:
    """Compare every compared cell with its GPU type's reference environment (`reference`: an environment id, used
    where it ran; else the base, `reference_env`). A cell's reference cell: its scenario's cell there, else a cell
    there of the same key without a fault or expectation."""
    by_gpu: dict[str, list[Record]] = {}
    for r in records:
        if _usable(r):
            by_gpu.setdefault(r.cell.gpu, []).append(r)
    refs: list[str] = []
    out: list[Comparison] = []
    without: list[str] = []
    for gpu in sorted(by_gpu):
        usable = by_gpu[gpu]
        ref_env = reference if reference is not None and any(r.env == reference for r in usable) else reference_env(usable)
        if ref_env is None:
            continue
        refs.append(ref_env)
        theirs = sorted((r for r in usable if r.env == ref_env and r.workload), key=_plainest)
        by_scenario = {r.cell.scenario: r for r in theirs}
        by_key: dict[tuple[str, ...], Record] = {}
        for r in theirs:
            by_key.setdefault(key(r), r)
        for r in sorted(usable, key=lambda r: r.id):
            if not compared(r):
                continue
            ref = by_scenario.get(r.cell.scenario) if r.fault == "none" else None
            if ref is None or key(ref) != key(r):
                ref = by_key.get(key(r))
            if ref is None:
                without.append(r.id)
            elif ref.id != r.id:
                out.append(compare(ref, r))
    return DriftReport(tuple(refs), tuple(out), tuple(without))


#: The word bisect and watch use for a cell that trains but whose numbers left the reference's.
LABEL = "drift"
WORDS = {"logp": "log-probabilities", "loss": "loss", "nll": "NLL", "grad_norm": "gradient norm", "weights": "weights", "tokens": "completion tokens"}


def against(reference: Record, record: Record) -> Comparison | None:
    """`record` against one reference cell (a watch's baseline, a bisection's good release), when both carry
    fingerprints of the same model, dtype, attention and device; else None."""
    if not (_usable(reference) and _usable(record)) or key(reference) != key(record):
        return None
    return compare(reference, record)


def brief(c: Comparison, whose: str = "your baseline", *, detail: bool = False) -> str:
    """The one sentence of a comparison: `numbers differ from your baseline from step 0: log-probabilities 2e-02 away;
    its loss curve leaves it at step 2`, or `numbers agree with your baseline (largest log-probability difference
    3e-07)`. `detail` (the report's finding): each quantity with where it differs and its tolerance, every largest
    difference, and what differs between the sides."""
    first = c.first
    if first is None:
        if detail:
            return f"numbers agree with {whose} (largest: {', '.join(f'{k} {v:.1e}' for k, v in c.worst.items()) or 'identical'})"
        logp = c.worst.get("logp")
        return f"numbers agree with {whose}" + (f" (largest log-probability difference {logp:.0e})" if logp is not None else "")
    name, _, group = first.quantity.partition("[")
    word = WORDS.get(name, name) + (f" of the {group.rstrip(']')} parameters" if group else "")
    size = "" if math.isinf(first.size) else f" {first.size:.0e} {'relative' if name == 'grad_norm' else 'away'}"
    text = f"numbers differ from {whose} from step {first.step}: {first.text if detail else word + size}"
    if (later := c.later) is not None and later is not first:
        text += f"; its {later.quantity if detail else WORDS.get(later.quantity, later.quantity)} curve leaves it at step {later.step}"
    if c.changed:
        text += f"; what differs: {'; '.join(c.changed)}" if detail else f" ({'; '.join(c.changed)})"
    return text


@dataclass(frozen=True)
class Seen:
    """What a follow-up question (bisect) reads of a cell that trained: `drift` or its class, and why."""

    label: str
    text: str


def drift_label(reference: Record, record: Record) -> Seen | None:
    """A cell that trained (ok) against the reference cell: `drift` when its numbers left the reference's, else ok;
    None when it did not train or the two cannot be compared (bisect then reads its outcome as it is)."""
    if record.klass != Outcome.OK or (c := against(reference, record)) is None:
        return None
    return Seen(LABEL if c.drifts else record.klass, brief(c, "the good release's"))
