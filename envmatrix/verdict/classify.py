"""Pure classification: everything a run left → one outcome, with its evidence and a remedy.

`ok` needs positive evidence of training: finite, non-zero gradient norms on the first logged steps, or a
probe result that finished its steps. A run that shows no failure and no such evidence (an empty log,
only warnings, a clean exit and nothing else) is `inconclusive`, with what is missing as its evidence;
an unrecognised exception line (`SomethingError: …` at a line start) is `error`, quoting it.

Rules are tried in the outcome table's precedence order (records/outcomes.py, `rank`); the first that
fires wins, and the others that fire are kept as `also`. The order is deliberate (and tested): a root
cause beats its consequences. A SIGFPE that kills rank 1 beats the
NCCL timeout rank 0 logs next; a NaN loss beats the `probability tensor` crash it causes in `generate`;
garbled attention beats the zero advantages it produces; specific crashes beat a wall-clock timeout.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ..facts.enginefailures import remedy_for as engine_remedy
from ..records.outcomes import TABLE, Outcome, Verdict, decided
from ..records.probe_result import EnvFacts, KernelCheck, ProbeResult
from . import evidence, remedies
from .boundary import guarded
from .garble import garbled
from .imports import read_missing
from .imports import remedy as missing_remedy
from .logscan import LogScan
from .stated import dist_of


@dataclass(frozen=True)
class RunFacts:
    """Everything a run left: the probe's result and metrics when present, exit status, log scan, runner flags."""

    scan: LogScan = field(default_factory=LogScan)
    exit_code: int | None = None
    probe: ProbeResult | None = None
    metrics: tuple[dict[str, Any], ...] = ()
    timed_out: bool = False
    build_failed: str | None = None
    installed: Mapping[str, str] = field(default_factory=dict)  # the environment's freeze (distribution -> version), where known

    @property
    def result(self) -> dict[str, Any] | None:
        """result.json as the probe wrote it, for what echoes it (the record, `envmatrix probe --json`); the
        rules read `probe`, its type."""
        return self.probe.as_json() if self.probe is not None else None

    @property
    def measured(self) -> ProbeResult:
        """The probe's result when one was read; an empty one otherwise (an unreadable file is no evidence)."""
        return self.probe if self.probe is not None and self.probe.readable else NO_RESULT


NO_RESULT = ProbeResult()


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


def _log(outcome: Outcome) -> Rule:
    """An outcome's evidence in the log: a signature's line, else an exception a rule named so or a library code that
    means it (the log read as structure)."""

    def rule(f: RunFacts) -> str | None:
        hit = f.scan.first(outcome)
        if hit is None:
            return evidence.structural(f.scan, outcome)
        code = next((c for c, at in f.scan.codes if at.line_no == hit.line_no and c.outcome == outcome), None)
        return hit.quote() + (f" ({code.describe()})" if code else "")

    return rule


def _g(value: float | None, spec: str) -> str:
    """A figure for evidence text; `None` where the result left it out (a damaged or partial result)."""
    return format(value, spec) if value is not None else "None"


def _shape(label: KernelCheck) -> str:
    """A kernel-stage check's label as text: model, op, dtype and sizes (and a mismatch's figures), in the probe's order."""
    return " ".join(f"{f.name}={value}" for f in fields(label) if f.name not in ("problem", "error") and (value := getattr(label, f.name)) is not None)


def _kernel_failure(f: RunFacts, problem: str) -> str | None:
    """The first real-size kernel check (probe stage `kernels`) that failed this way, as evidence."""
    kernels = f.measured.kernels
    if kernels is None:
        return None
    for failure in kernels.failures:
        if failure.problem == problem:
            detail = f": {failure.error}" if failure.error else ""
            return f"probe kernel stage: {problem.replace('_', '-')} at {_shape(failure)}{detail} ({len(kernels.failures)} of {kernels.checked} checks failed)"
    return None


def _sigfpe(f: RunFacts) -> str | None:
    if signal_number(f.exit_code) == signal.SIGFPE:
        hit = f.scan.first(Outcome.SIGFPE)
        kernels = f.measured.kernels
        running = _shape(kernels.running) if kernels is not None and kernels.running is not None else ""
        where = f" in the kernel stage at {running}" if running else ""
        return f"process died of SIGFPE (exit status {f.exit_code}){where}" + (f"; {hit.quote()}" if hit else "")
    return _log(Outcome.SIGFPE)(f)


def _nan(f: RunFacts) -> str | None:
    kernel = _kernel_failure(f, "non_finite")
    if kernel is not None:
        return kernel
    step = f.measured.first_nonfinite_step
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
    return _log(Outcome.NAN_LOSS)(f)


def _grad_lost(f: RunFacts) -> str | None:
    params = f.measured.params
    if params is not None and params.with_grad is not None and params.trainable is not None and 0 < params.with_grad < params.trainable:
        example = f" (e.g. {params.without_grad[0]})" if params.without_grad else ""
        return f"probe: {params.trainable - params.with_grad} of {params.trainable} trainable parameters never received a gradient{example}"
    if f.scan.first_variant(Outcome.GRAD_LOST) == "none_inputs" and not _warning_confirmed(f):
        return evidence.structural(f.scan, Outcome.GRAD_LOST)  # checkpointing's warning alone is no failure
    return _log(Outcome.GRAD_LOST)(f)


def _warning_confirmed(f: RunFacts) -> bool:
    """Checkpointing's `None of the inputs have requires_grad=True` warning is printed by many healthy runs (frozen
    embeddings with non-reentrant checkpointing, the first eval step): it names lost gradients only beside a run that failed
    in training (a traceback) or whose logged gradients are all zero."""
    norms = f.scan.values("grad_norm")
    return bool(f.scan.raised) or (bool(norms) and all(v == 0 for v in norms))


def _garbled(f: RunFacts) -> str | None:
    parity = f.measured.parity
    if parity is not None and parity.within_tolerance is False:
        family = f"{parity.family} ({parity.path or 'text'} path) " if parity.family else ""
        return (
            f"probe: attention parity failed: {family}{parity.implementation} {parity.dtype} logits vs fp32 eager "
            f"rel err {_g(parity.rel_err, '.3g')} > tolerance {_g(parity.tolerance, '.3g')} "
            f"(same-dtype eager {_g(parity.baseline_rel_err, '.3g')})"
        )
    kernel = _kernel_failure(f, "mismatch")
    if kernel is not None:
        return kernel
    for i, text in enumerate(f.measured.samples):
        judged = garbled(text)
        if judged is not None:
            return f"probe sample {i}: {judged.reason}: {text[:160]}"
    if f.scan.garbled is not None:
        hit, reason = f.scan.garbled
        return f"{hit.quote()} ({reason})"
    return _log(Outcome.GARBLED_OUTPUT)(f)


FIRST_STEPS = 3
#: Steps with a zero gradient that make a finding: one tied group in warm-up proves nothing.
ZERO_STEPS = 2


def _zero_grad(f: RunFacts) -> str | None:
    rows = [m for m in f.metrics if isinstance(m.get("grad_norm"), (int, float))][:FIRST_STEPS]
    if len(rows) >= ZERO_STEPS and all(m["grad_norm"] == 0 for m in rows):
        last = rows[-1]
        diversity = f", distinct completions {last['distinct_ratio']:.2g}" if isinstance(last.get("distinct_ratio"), (int, float)) else ""
        return (
            f"probe: grad_norm 0.0 on steps {rows[0].get('step')}-{last.get('step')} "
            f"(reward_std {last.get('reward_std')}, frac_reward_zero_std {last.get('frac_reward_zero_std')}{diversity}){_sampling(f)}"
        )
    if rows and all(m["grad_norm"] == 0 for m in rows) and _untied(rows[0].get("reward_std"), rows[0].get("frac_reward_zero_std")):
        return (
            f"probe: grad_norm 0.0 at step {rows[0].get('step')} while the rewards were not tied (reward_std {rows[0].get('reward_std')}, "
            f"frac_reward_zero_std {rows[0].get('frac_reward_zero_std')}): tied groups cannot explain a zero gradient"
        )
    if f.metrics:
        return None
    norms = f.scan.metrics.get("grad_norm", [])[:FIRST_STEPS]
    if len(norms) >= ZERO_STEPS and all(v == 0 for v, _ in norms):
        return f"grad_norm 0.0 on the first {len(norms)} logged steps ({norms[0][1].quote()})"
    if norms and all(v == 0 for v, _ in norms) and (why := _untied_in_log(f.scan, norms[0][1].line_no)) is not None:
        return f"grad_norm 0.0 on the logged step while the rewards were not tied ({why}): tied groups cannot explain a zero gradient ({norms[0][1].quote()})"
    spread = f.scan.metrics.get("reward_std", [])[:FIRST_STEPS]
    if not norms and len(spread) == FIRST_STEPS and all(v == 0 for v, _ in spread):
        return f"reward_std 0.0 on the first {FIRST_STEPS} logged steps: every group's rewards tie, so every advantage is 0 ({spread[0][1].quote()})"
    return None


def _zero_untied(f: RunFacts) -> bool:
    """The zero gradient shows beside rewards that were not tied (see `_zero_grad`)."""
    found = _zero_grad(f)
    return found is not None and "not tied" in found


def _untied(reward_std: Any, frac_zero_std: Any) -> bool:
    """Rewards that differ within a group: a zero advantage cannot come from tied groups (reward_std > 0, or some group
    whose rewards are not all equal: frac_reward_zero_std < 1)."""
    std, frac = _number(reward_std), _number(frac_zero_std)
    return (std is not None and std > 0) or (frac is not None and frac < 1)


def _untied_in_log(scan: LogScan, line_no: int) -> str | None:
    """`reward_std 0.41` / `frac_reward_zero_std 0.25` logged on the same step as a zero gradient, where the rewards were
    not tied; None where the log does not show it."""
    same = {key: next((v for v, hit in scan.metrics.get(key, []) if abs(hit.line_no - line_no) <= 2), None) for key in ("reward_std", "frac_reward_zero_std")}
    if not _untied(same["reward_std"], same["frac_reward_zero_std"]):
        return None
    return ", ".join(f"{k} {v:g}" for k, v in same.items() if v is not None)


def _sampling(f: RunFacts) -> str:
    """`; sampling asked: temperature 0.01, top_p 1.0, top_k 1`, and the checkpoint's own generation_config where one
    was saved (it may override what was asked): the settings that make a group's completions tie."""
    opts = f.measured.options
    asked = [f"{name} {value}" for name in ("temperature", "top_p", "top_k") if (value := getattr(opts, name)) is not None]
    said = f"; sampling asked: {', '.join(asked)}" if asked else ""
    generation = f.measured.generation
    if generation is not None and generation.saved:
        saved = ", ".join(f"{k} {v}" for k, v in generation.saved.items() if k in ("temperature", "top_p", "top_k"))
        said += f"; the checkpoint's generation_config ({generation.passed_as or 'saved'}): {saved}"
    return said


def _timeout(f: RunFacts) -> str | None:
    if f.timed_out:
        return "the run exceeded its wall-clock timeout and was killed"
    return _log(Outcome.TIMEOUT)(f)


def _crash(f: RunFacts) -> str | None:
    """A process killed by a signal, or a device fault (a CUDA code that loses the context). A SIGABRT in a run that shows
    an NCCL failure is NCCL's watchdog aborting the process it gave up on: a consequence, not the cause."""
    device = evidence.structural(f.scan, Outcome.CRASH) if f.scan.first(Outcome.CRASH) is None else None
    num = signal_number(f.exit_code)
    nccl = _log(Outcome.NCCL_ERROR)(f) is not None
    killed_for_time = f.timed_out and num in (signal.SIGKILL, signal.SIGTERM)  # the runner's own kill: a timeout
    if num is not None and num not in (signal.SIGINT, signal.SIGTERM, signal.SIGFPE) and not (num == signal.SIGABRT and nccl) and not killed_for_time:
        return f"process killed by {_signal_name(num)} (exit status {f.exit_code})" + (f"; {device}" if device else "")
    variant = f.scan.first_variant(Outcome.CRASH)
    if variant is not None and not (nccl and _consequence(variant, f.scan.hits[f"crash:{variant}"].line)):
        return f.scan.hits[f"crash:{variant}"].quote()
    return device


def _aborted(line: str) -> bool:
    return "-6" in line or "SIGABRT" in line or "Signal 6" in line or "Aborted" in line


def _consequence(variant: str, line: str) -> bool:
    """A crash notice that, in a run with an NCCL failure, reports that failure's end rather than a cause of its own: the
    watchdog's abort (SIGABRT), or a worker death that names no signal (Ray's `A worker died or was killed … by an
    unexpected system error` after ProcessGroupNCCL's errors)."""
    if variant in ("exitcode", "elastic", "core"):
        return _aborted(line)
    return variant == "worker_died" and (_aborted(line) or _SIGNAL_NAMED.search(line) is None)


#: A signal (or the OOM killer) that a worker-death notice names as what ended the process.
_SIGNAL_NAMED = re.compile(r"SIG(?:SEGV|BUS|ILL|KILL|FPE)|[Ss]ignal:? (?:4|7|8|9|11|Killed)\b|[Ss]egmentation|Bus error|\bOOM\b|[Oo]ut of memory")


#: logscan's signatures of a run that failed without raising (llama.cpp's `failed to load model`, Slurm's launch refusal).
_ERROR_SAID = ("error:model_load", "error:srun", "error:build", "error:cli")


def _error(f: RunFacts) -> str | None:
    res = f.measured
    kernel = _kernel_failure(f, "raised")
    if kernel is not None:
        return kernel
    err = res.error
    if err is not None and (err.type or err.message or err.stage):
        return f"probe raised {err.type} during {err.stage}: {str(err.message)[:300]}"
    if f.scan.raised:  # read as structure: the exception that ended the run (teardown noise is none)
        last = evidence.last_exception(f.scan)
        quoted = evidence.quote(last) if last is not None else None
    else:
        hit = f.scan.hits.get("error:line") or f.scan.first(Outcome.ERROR)
        quoted = hit.quote() if hit else None
    if quoted is None and (said := next((h for k in _ERROR_SAID if (h := f.scan.hits.get(k)) is not None), None)) is not None:
        quoted = said.quote()  # a failure printed without an exception, under teardown noise (`Exception ignored in …`)
    if f.exit_code not in (None, 0):
        return f"exit status {f.exit_code}" + (f"; {quoted}" if quoted else "")
    if res.finished is False:
        return f"probe did not finish (stage {res.stage}) and left no error"
    return quoted


def _missing_module(f: RunFacts) -> str | None:
    """A module (or library) not installed, in a run that did not train: a harmless `No module named` warning
    in a run that trained is not a failure."""
    if _ok_evidence(f) is not None:
        return None
    hit = f.scan.first(Outcome.MISSING_MODULE)
    if hit is not None and any(j.outcome == Outcome.ERROR and not j.fallback and j.raised.line_no == hit.line_no for j in f.scan.judged):
        hit = None  # a specific rule named that line the code's own error (a misspelt name, a shadowing file): not a missing module
    if hit is None:
        return evidence.structural(f.scan, Outcome.MISSING_MODULE)
    missing = read_missing(hit.line, hit.context)
    imported = f" (imported by {missing.importer})" if missing is not None and missing.importer else ""
    return hit.quote() + imported


def _api_mismatch(f: RunFacts) -> str | None:
    """Two releases that do not go together: a call the installed release does not take, or a package's own statement of
    the range it needs; a range statement about a package whose frames raised the run's exception explains that exception."""
    ranges = evidence.ranges(f.scan)
    said = f"; {ranges[0].text()}" if ranges else ""
    found = evidence.strong(f.scan, Outcome.API_MISMATCH)
    if found is not None:
        return evidence.quote(found, f.scan) + said
    hit = f.scan.first(Outcome.API_MISMATCH)  # a known mismatch the engines' table names (facts/enginefailures.py)
    if hit is not None:
        return hit.quote() + said
    last = evidence.last_exception(f.scan)
    if last is None and (cli := _cli_refused(f)) is not None:
        return cli
    if last is not None and last.outcome in (Outcome.ERROR, Outcome.ENGINE_ERROR):
        packages = {fr.package for fr in last.raised.frames}
        for stated in ranges:
            if _dist(stated.package) in packages or (stated.said_by and _dist(stated.said_by) in packages):
                return f"{evidence.quote(last)}; {stated.text()}: {stated.line}"
    # no exception, nothing trained: a package's own statement that an installed release is outside its range is the failure
    stated_line = f.scan.hits.get("evidence:range")
    if last is None and stated_line is not None and ranges and ranges[0].violated and _ok_evidence(f) is None:
        return f"{stated_line.quote()} ({ranges[0].text()})"
    return None


def _cli_refused(f: RunFacts) -> str | None:
    """An installed distribution's command refusing an option or subcommand (`vllm serve: error: unrecognized arguments:
    --enable-reasoning`): that release's command line does not take what the command was written for (another release's
    options, or documentation ahead of the installed release). A script of the user's refusing one is the code's own error.
    Read only where the log raised no exception (the caller checks)."""
    hit = f.scan.hits.get("error:cli")
    if hit is None:
        return None
    said, told, _ = hit.line.partition(": error:")
    program = said.split() if told else []
    dist = dist_of(program[0]) if program else ""
    return f"{hit.quote()} (the installed {dist}'s command line does not take it)" if dist else None


def _dist(name: str) -> str:
    """A package name as frames name distributions (`vLLM` → `vllm`, `huggingface_hub` → `huggingface-hub`)."""
    return name.lower().replace("_", "-")


def _build(f: RunFacts) -> str | None:
    return f.build_failed


#: Each outcome's rule; they are tried in the outcome table's precedence order (`rank`).
_RULES: dict[Outcome, Rule] = {
    Outcome.BUILD_FAILED: _build,
    Outcome.SIGFPE: _sigfpe,
    Outcome.IMPORT_ABI: _log(Outcome.IMPORT_ABI),
    Outcome.UNKNOWN_MODEL: _log(Outcome.UNKNOWN_MODEL),
    Outcome.ENGINE_ERROR: _log(Outcome.ENGINE_ERROR),
    Outcome.API_MISMATCH: _api_mismatch,
    Outcome.MISSING_MODULE: _missing_module,
    Outcome.DRIVER_TOO_OLD: _log(Outcome.DRIVER_TOO_OLD),
    Outcome.UNSUPPORTED_GPU: _log(Outcome.UNSUPPORTED_GPU),
    Outcome.OOM: _log(Outcome.OOM),
    Outcome.DDP_READY_TWICE: _log(Outcome.DDP_READY_TWICE),
    Outcome.NAN_LOSS: _nan,
    Outcome.GARBLED_OUTPUT: _garbled,
    Outcome.GRAD_LOST: _grad_lost,
    Outcome.ZERO_GRAD: _zero_grad,
    Outcome.NCCL_ERROR: _log(Outcome.NCCL_ERROR),
    Outcome.TIMEOUT: _timeout,
    Outcome.CRASH: _crash,
    Outcome.ERROR: _error,
}
RULES: tuple[tuple[Outcome, Rule], ...] = tuple(sorted(_RULES.items(), key=lambda item: TABLE[item[0]].rank))


def _ok_evidence(f: RunFacts) -> str | None:
    """Positive evidence that training ran, or None: a finished probe result, or non-zero finite early gradients."""
    res = f.measured
    if res.finished and (res.steps_completed or 0) > 0:
        parts = [f"finished {res.steps_completed} steps"]
        norms = [m["grad_norm"] for m in f.metrics if isinstance(m.get("grad_norm"), (int, float))]
        if norms:
            parts.append(f"grad_norm {norms[0]:.3g} > 0")
        if res.params is not None:
            parts.append(f"{res.params.changed}/{res.params.trainable} trainable parameters changed")
        if res.parity is not None:
            parts.append(f"parity rel err {_g(res.parity.rel_err, '.2g')} within {_g(res.parity.tolerance, '.2g')}")
        return "; ".join(parts)
    early = [(v, hit) for v, hit in f.scan.metrics.get("grad_norm", [])][:FIRST_STEPS]
    if early and all(math.isfinite(v) for v, _ in early) and any(v != 0 for v, _ in early):
        value, hit = next((v, h) for v, h in early if v != 0)
        return f"no failure signature; grad_norm {value:.3g} > 0 on an early logged step ({hit.quote()})"
    return None


def _missing(f: RunFacts) -> str:
    """What an `inconclusive` verdict lacks, in the terms of the evidence `ok` needs."""
    res = f.measured
    if not res.empty and not res.steps_completed:
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


def _option(asked: Any, seen: dict[str, str], key: str) -> float | None:
    """A probe option as a number; the value the log shows where the probe's result does not say."""
    return _number(asked if asked is not None else seen.get(key))


def remedy(outcome: Outcome, facts: RunFacts, also: tuple[Outcome, ...] = ()) -> str:
    """The remedy for the cause the evidence shows (probe options and versions, facts read from the log);
    the outcome table's default where the evidence shows no more than the class."""
    res = facts.measured
    opts, env = res.options, res.env or EnvFacts()
    seen = facts.scan.facts
    default = TABLE[outcome].remedy
    if outcome == Outcome.GARBLED_OUTPUT and Outcome.ZERO_GRAD in also:
        return "the zero gradients follow from the garbled completions (identical nonsense ties every reward, so every advantage is 0): " + default
    parity = res.parity
    if outcome == Outcome.GARBLED_OUTPUT and parity is not None and parity.within_tolerance is False:
        impl = str(parity.implementation or opts.attn or "")
        if parity.family == "gemma2" and "flash" not in impl:
            return (
                f"Gemma-2's attention softcapping is not applied by {impl or 'this attention implementation'} in this transformers release, "
                "so its logits differ from eager: train Gemma-2 with attn_implementation='eager' "
                "(or flash_attention_2 from flash-attn >= 2.6.3, which applies the softcap)"
            )
        if parity.path == "image":
            return (
                "the image path disagrees with eager (vision tokens or multimodal rotary positions with left padding): "
                "use eager or sdpa for the VLM, and check position ids"
            )
    if outcome == Outcome.ENGINE_ERROR and (variant := facts.scan.first_variant(Outcome.ENGINE_ERROR)) is not None:
        return engine_remedy(variant)
    if outcome == Outcome.ENGINE_ERROR and (layer := remedies.engine(facts.scan)) is not None:
        return layer
    if outcome == Outcome.API_MISMATCH and (variant := facts.scan.first_variant(Outcome.API_MISMATCH)) is not None:
        return engine_remedy(variant)
    if outcome == Outcome.API_MISMATCH and (said := remedies.api_mismatch(facts.scan, facts.installed)) is not None:
        return said
    if outcome == Outcome.UNSUPPORTED_GPU and (lacking := remedies.unsupported_gpu(facts.scan)) is not None:
        return lacking
    if (own := remedies.code(facts.scan, outcome.value)) is not None:
        return own
    if outcome == Outcome.MISSING_MODULE and (hit := facts.scan.first(Outcome.MISSING_MODULE)) is not None:
        missing = read_missing(hit.line, hit.context)
        if missing is not None:
            return missing_remedy(missing)
    judged = evidence.strong(facts.scan, Outcome.MISSING_MODULE) if outcome == Outcome.MISSING_MODULE else None
    if judged is not None and (undefined := guarded(judged.raised)) is not None:
        name, dist = undefined
        return (
            f"{name} is {dist}'s, and the code imports it only when {dist} can be imported (a guarded import): install {dist}, "
            f"or, where it is installed, the {dist} release that defines {name} (the installed one lacks it)"
        )
    if outcome == Outcome.OOM and facts.scan.first_variant(Outcome.OOM) == "free_memory":
        return (
            "the engine found less free GPU memory at start-up than its gpu_memory_utilization asks for: lower "
            "gpu_memory_utilization (TRL's vllm_gpu_memory_utilization, verl's rollout.gpu_memory_utilization), or free what other "
            "processes on the GPU hold (a colocated trainer, a previous engine that did not exit)"
        )
    if outcome == Outcome.ZERO_GRAD and _zero_untied(facts):
        return (
            "the gradient is zero although rewards differ within groups, so the advantages are not zero: the loss does not reach "
            "the trainable parameters (parameters frozen or not handed to the optimizer, LoRA target modules that miss the model's "
            "layers, a loss multiplied by zero, gradients cleared before they are logged); check which parameters require grad"
        )
    if outcome == Outcome.ZERO_GRAD:
        temperature = _option(opts.temperature, seen, "temperature")
        top_p = _option(opts.top_p, seen, "top_p")
        top_k = _option(opts.top_k, seen, "top_k")
        if (temperature is not None and temperature < 0.3) or (top_p is not None and top_p < 0.5) or top_k == 1:
            return (
                f"sampling is near-greedy (temperature {temperature}, top_p {top_p}, top_k {top_k}): a group's completions are identical, "
                "so every advantage is 0; sample with temperature ~1.0 and top_p 0.8-1.0, and do not let the model's "
                "generation_config override the trainer's sampling settings"
            )
    if outcome == Outcome.NAN_LOSS:
        generations = _option(opts.num_generations, seen, "num_generations")
        if generations == 1 or "nan_loss:dof" in facts.scan.hits:
            return "num_generations is 1: a group of one completion has no standard deviation, so the advantages are NaN; use num_generations >= 2"
        if (diverged := remedies.divergence(facts.scan, facts.metrics)) is not None:
            return diverged
        model = f"{opts.model or ''} {seen.get('gemma2', '')}".lower().replace("-", "")
        flash = "flash" in str(opts.attn or "") or "flash_attn" in seen or bool(env.flash_attn)
        if "gemma2" in model and flash:
            found = f" (flash-attn {env.flash_attn} is installed)" if env.flash_attn else ""
            return f"Gemma-2 with flash-attn{found}: use flash-attn >= 2.6.3, the first release with softcap in the backward pass, or eager attention"
        if opts.dtype == "fp16":
            return "fp16 overflows here: train in bf16 (or fp32); " + default
    if outcome == Outcome.SIGFPE:
        version = str(env.cublas or seen.get("cublas") or "")
        if version and _old_cublas(version):
            return (
                f"cuBLAS {version} is loaded, and its GEMM heuristics divide by zero on H20/Hopper: use cuBLAS >= 12.3.4.1 / 12.4.5.8 "
                "(torch cu124+ wheels) and make sure that library is the one loaded (check LD_LIBRARY_PATH for an older system CUDA)"
            )
    return default


#: The user's own words for a failure the log does not print (logscan's `notice:said_*`), and why the words are all there is.
_SAID = {
    "notice:said_garbled": (Outcome.GARBLED_OUTPUT, "no garbled text is printed long enough to measure"),
    "notice:said_oom": (Outcome.OOM, "no allocator's or kernel's out-of-memory message is printed"),
    "notice:said_zero_grad": (Outcome.ZERO_GRAD, "no logged step's metrics are printed to judge"),
}


#: Words of advice around a failure's name (`to avoid running out of memory`, `without hitting OOM`): no failure told.
_ADVICE = re.compile(
    r"(?i)\b(?:avoid(?:s|ed|ing)?|prevent(?:s|ed|ing)?|without)\s+(?:[\w-]+\s+){0,2}?"
    r"(?:oom|running\s+out|run\s+out|hitting|getting|garbled|gibberish|repetitive|zero)\b"
)


def _said(facts: RunFacts) -> tuple[Outcome, str] | None:
    """The failure the log's own words tell, the first told where it tells several; None where it tells none (a line
    that gives advice against it tells none)."""
    hits = ((key, facts.scan.hits.get(key)) for key in _SAID)
    told = sorted((hit.line_no, key) for key, hit in hits if hit is not None and not _ADVICE.search(hit.line))
    if not told:
        return None
    key = told[0][1]
    outcome, why = _SAID[key]
    return outcome, f"{facts.scan.hits[key].quote()} (the log's own words: {why})"


def classify(facts: RunFacts) -> Verdict:
    """The first rule that fires decides; every other rule that fires is listed in `also`. An exception only a fallback
    rule names (a new failure inside an engine's frames) decides when nothing but `error` would."""
    fired = [(name, found) for name, rule in RULES if (found := rule(facts))]
    if not fired or fired[0][0] == Outcome.ERROR:
        weak = evidence.fallback(facts.scan)
        if weak is not None:
            fired.insert(0, (Outcome(weak.outcome), evidence.quote(weak)))
        elif (start := facts.scan.hits.get("notice:engine_start")) is not None:  # an engine that did not start, its cause unnamed
            fired.insert(0, (Outcome.ENGINE_ERROR, start.quote()))
    if not fired and (told := _said(facts)) is not None:  # told in words, nothing else failed
        fired.append(told)
    if not fired:
        trained = _ok_evidence(facts)
        if trained is None:
            return decided(Outcome.INCONCLUSIVE, _missing(facts), Outcome.INCONCLUSIVE.value)
        return decided(Outcome.OK, trained, Outcome.OK.value)
    name, shown = fired[0]
    also = tuple(dict.fromkeys(n for n, _ in fired[1:] if n not in (name, Outcome.ERROR)))
    return Verdict(name, shown, remedy(name, facts, also), name.value, also)


def control_status(expect: str | None, outcome: str) -> str | None:
    """`reproduced` / `not reproduced` for a control; None for a scenario without expectation."""
    if expect is None:
        return None
    return "reproduced" if outcome == expect else "not reproduced"
