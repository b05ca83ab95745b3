"""Pure classification: everything a run left → one outcome, with its evidence and a remedy.

`ok` needs positive evidence of training: finite, non-zero gradient norms on the first logged steps, or a
probe result that finished its steps. A run that shows no failure and no such evidence (an empty log,
only warnings, a clean exit and nothing else) is `inconclusive`, with what is missing as its evidence;
an unrecognised exception line (`SomethingError: …` at a line start) is `error`, quoting it.

Rules are ordered; the first that fires wins, and the others that fire are kept as `also`. The order
is deliberate (and tested): a root cause beats its consequences. A SIGFPE that kills rank 1 beats the
NCCL timeout rank 0 logs next; a NaN loss beats the `probability tensor` crash it causes in `generate`;
garbled attention beats the zero advantages it produces; specific crashes beat a wall-clock timeout.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..records.outcomes import Outcome
from ..records.record import Verdict
from .garble import garbled
from .logscan import LogScan

REMEDIES: dict[str, str] = {
    "ok": "nothing to fix: this stack trains cleanly in this scenario",
    "inconclusive": "nothing shows that training ran: log the first steps' grad_norm (e.g. logging_steps=1) or run the probe, "
    "and pass the exit status (--exit-code) if the process ended",
    "garbled_output": "install the flash-attn wheel built for this exact torch version, CUDA and C++ ABI "
    "(pip install flash-attn --no-build-isolation), pad on the left for generation, or fall back to sdpa",
    "nan_loss": "use num_generations >= 2 (a group of one has no std); for Gemma-2 use eager attention or flash-attn >= 2.6.3; prefer bf16 over fp16",
    "zero_grad": "sample with temperature ~1.0 and top_p 0.8-1.0, and do not let the model's generation_config override "
    "the trainer's sampling settings; if completions are gibberish, check attention (garbled output)",
    "grad_lost": "use gradient_checkpointing_kwargs={'use_reentrant': False}, or call model.enable_input_require_grads() "
    "before training with frozen inputs (LoRA, frozen embeddings), or disable gradient checkpointing",
    "ddp_ready_twice": "use gradient_checkpointing_kwargs={'use_reentrant': False}, or ddp_find_unused_parameters=False, or static_graph=True",
    "sigfpe": "on H20/Hopper use cuBLAS >= 12.3.4.1 / 12.4.5.8 (torch cu124+ wheels) and make sure that library is the one "
    "loaded (check LD_LIBRARY_PATH for an older system CUDA)",
    "import_abi": "install the flash-attn (or extension) wheel whose torch version, CUDA and CXX11 ABI match the installed torch; "
    "make sure no system CUDA shadows pip's libraries",
    "unsupported_gpu": "use a torch/flash-attn build that ships kernels for this GPU architecture, or another GPU (FlashAttention-2 needs sm80+)",
    "driver_too_old": "use a torch build for an older CUDA (e.g. cu126 instead of cu130), or upgrade the NVIDIA driver",
    "oom": "lower the batch size or sequence length, enable gradient checkpointing, or use a GPU with more memory",
    "nccl_error": "look for the rank that failed first (its error is the cause); otherwise check NCCL_DEBUG=INFO output, "
    "the network between GPUs, and raise the collective timeout only if a step is legitimately slow",
    "timeout": "the run hung or was too slow: look at the log tail for the last step reached; raise --timeout if it was making progress",
    "crash": "the process was killed by a signal: check the system log for the OOM killer (signal 9) or a native crash (signal 11)",
    "error": "read the evidence line and the log tail: this failure matches no known signature",
    "wrong_gpu": "the cell ran on another GPU type than its id names (or on none): pin the job to that GPU type "
    "(Slurm partition/constraint, runner label, nodeSelector) and run it again; its result says nothing about the GPU named",
    "build_failed": "read the failing build step in the log; pin versions that publish wheels for this Python/CUDA",
    "skipped": "see the reason: the catalog rules this combination out",
}


@dataclass(frozen=True)
class RunFacts:
    """Everything a run left: the probe's result and metrics when present, exit status, log scan, runner flags."""

    scan: LogScan = field(default_factory=LogScan)
    exit_code: int | None = None
    result: dict[str, Any] | None = None
    metrics: tuple[dict[str, Any], ...] = ()
    timed_out: bool = False
    build_failed: str | None = None


def signal_number(exit_code: int | None) -> int | None:
    """The signal that ended a process: -N from Python's subprocess, 128+N from a shell."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 160:
        return exit_code - 128
    return None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


Rule = Callable[[RunFacts], "str | None"]


def _log(outcome: str) -> Rule:
    def rule(f: RunFacts) -> str | None:
        hit = f.scan.first(outcome)
        return hit.quote() if hit else None

    return rule


def _shape(label: Any) -> str:
    """A kernel-stage check's label as text: model, op, dtype and sizes."""
    if not isinstance(label, dict):
        return str(label)
    return " ".join(f"{k}={v}" for k, v in label.items() if k not in ("problem", "error"))


def _kernel_failure(f: RunFacts, problem: str) -> str | None:
    """The first real-size kernel check (probe stage `kernels`) that failed this way, as evidence."""
    kernels = (f.result or {}).get("kernels") or {}
    failures = kernels.get("failures") if isinstance(kernels, dict) else None
    if not isinstance(failures, list):
        return None
    for failure in failures:
        if isinstance(failure, dict) and failure.get("problem") == problem:
            detail = f": {failure['error']}" if failure.get("error") else ""
            return f"probe kernel stage: {problem.replace('_', '-')} at {_shape(failure)}{detail} ({len(failures)} of {kernels.get('checked')} checks failed)"
    return None


def _sigfpe(f: RunFacts) -> str | None:
    if signal_number(f.exit_code) == signal.SIGFPE:
        hit = f.scan.first("sigfpe")
        running = ((f.result or {}).get("kernels") or {}).get("running")
        where = f" in the kernel stage at {_shape(running)}" if running else ""
        return f"process died of SIGFPE (exit status {f.exit_code}){where}" + (f"; {hit.quote()}" if hit else "")
    return _log("sigfpe")(f)


def _nan(f: RunFacts) -> str | None:
    res = f.result or {}
    kernel = _kernel_failure(f, "non_finite")
    if kernel is not None:
        return kernel
    step = res.get("first_nonfinite_step")
    if step is not None:
        row = next((m for m in f.metrics if m.get("step") == step), {})
        return f"probe: first non-finite step {step} (loss {row.get('loss')}, grad_norm {row.get('grad_norm')})"
    for row in f.metrics:
        for key in ("loss", "grad_norm"):
            value = row.get(key)
            if isinstance(value, float) and not math.isfinite(value):
                return f"metrics step {row.get('step')}: {key} {value}"
    if f.scan.nonfinite is not None:
        return f.scan.nonfinite.quote()
    return _log("nan_loss")(f)


def _section(f: RunFacts, key: str) -> dict[str, Any]:
    """A mapping from the probe's result, empty when absent or of another type (results may come from other hosts)."""
    value = (f.result or {}).get(key)
    return value if isinstance(value, dict) else {}


def _samples(f: RunFacts) -> list[str]:
    """The probe's sample completions as text (result.json `samples`), empty when absent or malformed."""
    value = (f.result or {}).get("samples")
    return [str(x) for x in value] if isinstance(value, list) else []


def _grad_lost(f: RunFacts) -> str | None:
    params = (f.result or {}).get("params") or {}
    with_grad, total = params.get("with_grad"), params.get("trainable")
    if isinstance(with_grad, int) and isinstance(total, int) and 0 < with_grad < total:
        missing = params.get("without_grad") or []
        example = f" (e.g. {missing[0]})" if missing else ""
        return f"probe: {total - with_grad} of {total} trainable parameters never received a gradient{example}"
    return _log("grad_lost")(f)


def _garbled(f: RunFacts) -> str | None:
    parity = (f.result or {}).get("parity") or {}
    if parity.get("within_tolerance") is False:
        family = f"{parity['family']} ({parity.get('path', 'text')} path) " if parity.get("family") else ""
        return (
            f"probe: attention parity failed: {family}{parity.get('implementation')} {parity.get('dtype')} logits vs fp32 eager "
            f"rel err {parity.get('rel_err'):.3g} > tolerance {parity.get('tolerance'):.3g} "
            f"(same-dtype eager {parity.get('baseline_rel_err'):.3g})"
        )
    kernel = _kernel_failure(f, "mismatch")
    if kernel is not None:
        return kernel
    for i, text in enumerate(_samples(f)):
        judged = garbled(text)
        if judged is not None:
            return f"probe sample {i}: {judged.reason}: {text[:160]}"
    if f.scan.garbled is not None:
        hit, reason = f.scan.garbled
        return f"{hit.quote()} ({reason})"
    return _log("garbled_output")(f)


FIRST_STEPS = 3


def _zero_grad(f: RunFacts) -> str | None:
    rows = [m for m in f.metrics if isinstance(m.get("grad_norm"), (int, float))][:FIRST_STEPS]
    if rows and all(m["grad_norm"] == 0 for m in rows):
        last = rows[-1]
        diversity = f", distinct completions {last['distinct_ratio']:.2g}" if isinstance(last.get("distinct_ratio"), (int, float)) else ""
        return (
            f"probe: grad_norm 0.0 on steps {rows[0].get('step')}-{last.get('step')} "
            f"(reward_std {last.get('reward_std')}, frac_reward_zero_std {last.get('frac_reward_zero_std')}{diversity})"
        )
    if f.metrics:
        return None
    norms = f.scan.metrics.get("grad_norm", [])[:FIRST_STEPS]
    if norms and all(v == 0 for v, _ in norms):
        return norms[0][1].quote()
    return None


def _timeout(f: RunFacts) -> str | None:
    return "the run exceeded its wall-clock timeout and was killed" if f.timed_out else None


def _crash(f: RunFacts) -> str | None:
    num = signal_number(f.exit_code)
    if num is not None and num not in (signal.SIGINT, signal.SIGTERM, signal.SIGFPE):
        return f"process killed by {_signal_name(num)} (exit status {f.exit_code})"
    return _log("crash")(f)


def _error(f: RunFacts) -> str | None:
    res = f.result or {}
    kernel = _kernel_failure(f, "raised")
    if kernel is not None:
        return kernel
    if res.get("error"):
        err = res["error"]
        return f"probe raised {err.get('type')} during {err.get('stage')}: {str(err.get('message'))[:300]}"
    hit = f.scan.hits.get("error:line") or f.scan.first("error")
    if f.exit_code not in (None, 0):
        return f"exit status {f.exit_code}" + (f"; {hit.quote()}" if hit else "")
    if res and not res.get("finished", True):
        return f"probe did not finish (stage {res.get('stage')}) and left no error"
    return hit.quote() if hit else None


def _build(f: RunFacts) -> str | None:
    return f.build_failed


RULES: tuple[tuple[str, Rule], ...] = (
    (Outcome.BUILD_FAILED.value, _build),
    (Outcome.SIGFPE.value, _sigfpe),
    (Outcome.IMPORT_ABI.value, _log("import_abi")),
    (Outcome.DRIVER_TOO_OLD.value, _log("driver_too_old")),
    (Outcome.UNSUPPORTED_GPU.value, _log("unsupported_gpu")),
    (Outcome.OOM.value, _log("oom")),
    (Outcome.DDP_READY_TWICE.value, _log("ddp_ready_twice")),
    (Outcome.NAN_LOSS.value, _nan),
    (Outcome.GARBLED_OUTPUT.value, _garbled),
    (Outcome.GRAD_LOST.value, _grad_lost),
    (Outcome.ZERO_GRAD.value, _zero_grad),
    (Outcome.NCCL_ERROR.value, _log("nccl_error")),
    (Outcome.TIMEOUT.value, _timeout),
    (Outcome.CRASH.value, _crash),
    (Outcome.ERROR.value, _error),
)


def _ok_evidence(f: RunFacts) -> str | None:
    """Positive evidence that training ran, or None: a finished probe result, or non-zero finite early gradients."""
    res = f.result
    if res and res.get("finished") and (res.get("steps_completed") or 0) > 0:
        parts = [f"finished {res.get('steps_completed')} steps"]
        norms = [m["grad_norm"] for m in f.metrics if isinstance(m.get("grad_norm"), (int, float))]
        if norms:
            parts.append(f"grad_norm {norms[0]:.3g} > 0")
        params = res.get("params") or {}
        if params:
            parts.append(f"{params.get('changed')}/{params.get('trainable')} trainable parameters changed")
        parity = res.get("parity") or {}
        if parity:
            parts.append(f"parity rel err {parity.get('rel_err'):.2g} within {parity.get('tolerance'):.2g}")
        return "; ".join(parts)
    early = [(v, hit) for v, hit in f.scan.metrics.get("grad_norm", [])][:FIRST_STEPS]
    if early and all(math.isfinite(v) for v, _ in early) and any(v != 0 for v, _ in early):
        value, hit = next((v, h) for v, h in early if v != 0)
        return f"no failure signature; grad_norm {value:.3g} > 0 on an early logged step ({hit.quote()})"
    return None


def _missing(f: RunFacts) -> str:
    """What an `inconclusive` verdict lacks, in the terms of the evidence `ok` needs."""
    res = f.result
    if res and not (res.get("steps_completed") or 0):
        return "no failure signature, but the probe result shows no completed step"
    seen = f"{f.scan.lines} log lines" + (f", exit status {f.exit_code}" if f.exit_code is not None else ", no exit status")
    return f"no failure signature, and no evidence of training: no grad_norm on the first logged steps and no finished probe result ({seen})"


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".") if x.isdigit())


#: The first cuBLAS builds without the H20/Hopper GEMM divide-by-zero, per minor line (FACTS §6).
SAFE_CUBLAS: dict[tuple[int, ...], tuple[int, ...]] = {(12, 3): (12, 3, 4, 1), (12, 4): (12, 4, 5, 8)}


def _old_cublas(version: str) -> bool:
    v = _version(version)
    return v < SAFE_CUBLAS.get(v[:2], SAFE_CUBLAS[(12, 3)])


def remedy(outcome: str, facts: RunFacts, also: tuple[str, ...] = ()) -> str:
    """The remedy for the cause the evidence shows (probe options and versions, facts read from the log);
    REMEDIES[outcome] where the evidence shows no more than the class."""
    opts, env = _section(facts, "options"), _section(facts, "env")
    seen = facts.scan.facts
    if outcome == "garbled_output" and "zero_grad" in also:
        return (
            "the zero gradients follow from the garbled completions (identical nonsense ties every reward, so every advantage is 0): "
            + REMEDIES["garbled_output"]
        )
    if outcome == "garbled_output":
        parity = (facts.result or {}).get("parity") or {}
        impl = str(parity.get("implementation") or opts.get("attn") or "")
        if parity.get("within_tolerance") is False and parity.get("family") == "gemma2" and "flash" not in impl:
            return (
                f"Gemma-2's attention softcapping is not applied by {impl or 'this attention implementation'} in this transformers release, "
                "so its logits differ from eager: train Gemma-2 with attn_implementation='eager' "
                "(or flash_attention_2 from flash-attn >= 2.6.3, which applies the softcap)"
            )
        if parity.get("within_tolerance") is False and parity.get("path") == "image":
            return (
                "the image path disagrees with eager (vision tokens or multimodal rotary positions with left padding): "
                "use eager or sdpa for the VLM, and check position ids"
            )
    if outcome == "zero_grad":
        temperature = _number(opts.get("temperature", seen.get("temperature")))
        top_p = _number(opts.get("top_p", seen.get("top_p")))
        if (temperature is not None and temperature < 0.3) or (top_p is not None and top_p < 0.5):
            return (
                f"sampling is near-greedy (temperature {temperature}, top_p {top_p}): a group's completions are identical, "
                "so every advantage is 0; sample with temperature ~1.0 and top_p 0.8-1.0, and do not let the model's "
                "generation_config override the trainer's sampling settings"
            )
    if outcome == "nan_loss":
        generations = _number(opts.get("num_generations", seen.get("num_generations")))
        if generations == 1 or "nan_loss:dof" in facts.scan.hits:
            return "num_generations is 1: a group of one completion has no standard deviation, so the advantages are NaN; use num_generations >= 2"
        model = f"{opts.get('model') or ''} {seen.get('gemma2', '')}".lower().replace("-", "")
        flash = "flash" in str(opts.get("attn") or "") or "flash_attn" in seen or bool(env.get("flash_attn"))
        if "gemma2" in model and flash:
            found = f" (flash-attn {env['flash_attn']} is installed)" if env.get("flash_attn") else ""
            return f"Gemma-2 with flash-attn{found}: use flash-attn >= 2.6.3, the first release with softcap in the backward pass, or eager attention"
        if opts.get("dtype") == "fp16":
            return "fp16 overflows here: train in bf16 (or fp32); " + REMEDIES["nan_loss"]
    if outcome == "sigfpe":
        version = str(env.get("cublas") or seen.get("cublas") or "")
        if version and _old_cublas(version):
            return (
                f"cuBLAS {version} is loaded, and its GEMM heuristics divide by zero on H20/Hopper: use cuBLAS >= 12.3.4.1 / 12.4.5.8 "
                "(torch cu124+ wheels) and make sure that library is the one loaded (check LD_LIBRARY_PATH for an older system CUDA)"
            )
    return REMEDIES[outcome]


def classify(facts: RunFacts) -> Verdict:
    """The first rule that fires decides; every other rule that fires is listed in `also`."""
    fired = [(name, evidence) for name, rule in RULES if (evidence := rule(facts))]
    if not fired:
        evidence = _ok_evidence(facts)
        if evidence is None:
            return Verdict.of("inconclusive", _missing(facts), REMEDIES["inconclusive"], "inconclusive")
        return Verdict.of("ok", evidence, REMEDIES["ok"], "ok")
    name, evidence = fired[0]
    also = tuple(dict.fromkeys(n for n, _ in fired[1:] if n not in (name, "error")))
    return Verdict.of(name, evidence, remedy(name, facts, also), name, also)


def control_status(expect: str | None, outcome: str) -> str | None:
    """`reproduced` / `not reproduced` for a control; None for a scenario without expectation."""
    if expect is None:
        return None
    return "reproduced" if outcome == expect else "not reproduced"


def decided(outcome: str, evidence: str, rule: str) -> Verdict:
    """A verdict fixed before any run: a cell the catalog or the runner skips, a backend that raised."""
    return Verdict.of(outcome, evidence, REMEDIES[outcome], rule)
