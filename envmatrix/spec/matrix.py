"""Load and validate matrix.yaml into frozen, typed objects.

Every problem found is collected (not just the first) and reported with the file, the line and the
field path, so one run of `envmatrix plan` shows a user everything to fix. Versions and names are
checked against strict patterns here, before any of them can reach a shell or a Dockerfile.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from probes.untrusted import kind_of, number_problem

from ..errors import SpecError
from ..facts import catalog, flashsource
from ..facts.families import NAMES as MODEL_FAMILIES
from ..records.outcomes import EXPECTABLE
from .patterns import MAX_PATTERNS
from .patterns import check as pattern_bounds
from .yamlsrc import Path_, Source, load_yaml, parse_yaml

AXES: tuple[str, ...] = ("cuda", "torch", "transformers", "flash_attn", "gpu", "python")

# Always used with fullmatch: `$` also matches before a final newline, and "2.5.1\n" must not pass.
_SAFE = re.compile(r"[A-Za-z0-9._+-]+")
_PEP440 = re.compile(r"[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9]+(\.[a-z0-9]+)*)?")
_CUDA = re.compile(r"[0-9]+\.[0-9]+")
_PYTHON = re.compile(r"3\.[0-9]+")
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
MAX_CELLS = 50_000  # environments × scenarios in one profile: a real matrix has a few thousand
MAX_RULES = 256  # include or exclude entries in one profile


@dataclass(frozen=True)
class Scenario:
    """One probe configuration; field names match the probe's command-line options."""

    name: str
    description: str = ""
    model: str = "qwen2"
    dtype: str = "fp32"
    attn: str = "sdpa"
    grad_ckpt: str = "off"
    lora: bool = False
    freeze_embeddings: bool = False
    input_grad_hook: bool = True
    world_size: int = 1
    num_generations: int = 4
    std: str = "unbiased"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    steps: int = 4
    beta: float = 0.0
    lr: float = 1e-3
    seed: int = 0
    find_unused_parameters: bool = False
    static_graph: bool = False
    saved_gen_config: str = "none"
    kernels: str = "off"
    fault: str = "none"
    trainer: str = "builtin"
    parallel: str = "ddp"
    use_vllm: bool = False
    shrink: bool = False
    trust_remote_code: bool = False
    expect: str | None = None

    def probe_args(self) -> list[str]:
        """The probe's command line for this scenario (world size goes to torchrun, not here)."""
        args: list[str] = []
        for f in fields(self):
            if f.name in ("name", "description", "expect", "world_size"):
                continue
            value = getattr(self, f.name)
            flag = "--" + f.name.replace("_", "-")
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + f.name.replace("_", "-"))
            else:
                args += [flag, str(value)]
        return args


@dataclass(frozen=True)
class Rule:
    """An include/exclude entry: axis (or `scenario`) → accepted values, fnmatch patterns allowed."""

    where: str
    match: tuple[tuple[str, tuple[str, ...]], ...]
    reason: str = ""


@dataclass(frozen=True)
class Profile:
    """One named matrix: environment axes, the scenarios to run, and the rules over them."""

    name: str
    axes: dict[str, tuple[str, ...]]
    scenarios: tuple[str, ...]
    include: tuple[dict[str, str], ...] = ()
    exclude: tuple[Rule, ...] = ()
    select: tuple[str, ...] = ()
    skip: tuple[str, ...] = ()
    build_from_source: bool = False
    description: str = ""
    base_images: dict[str, str] = field(default_factory=dict)
    wheelhouse: str | None = None
    flash_attn_sources: tuple[str, ...] = flashsource.DEFAULT_SOURCES
    scheduler: Scheduler | None = None
    packages: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Scenario patterns that run in every environment, not once per value of what they depend on (plan/cover.py).
    every_environment: tuple[str, ...] = ()
    #: Per include entry, the scenario patterns it is there for (empty: every scenario of the profile).
    include_scenarios: tuple[tuple[str, ...], ...] = ()
    #: `all`: every planned control runs; `fewest`: one per detector stack a healthy cell needs (plan/vetrule.py).
    controls: str = "all"


@dataclass(frozen=True)
class GpuTarget:
    """Where one GPU type's shards run on each engine; every value already matched a strict pattern."""

    shards: int = 1
    partition: str | None = None
    gres: str | None = None
    constraint: str | None = None
    labels: tuple[str, ...] = ()
    product: str | None = None
    gpu_count: int = 0
    #: A team's own size for each shard of this GPU type, over what the plan computes (submit/__init__.py resources()):
    #: cores, memory in GB, a time limit in minutes; None where the plan's figure stands. And the Slurm account.
    cpus: int | None = None
    mem_gb: int | None = None
    minutes: int | None = None
    account: str | None = None


@dataclass(frozen=True)
class Scheduler:
    """A profile's `scheduler:` section: per GPU type targets, the array throttle, the k8s image and volume."""

    gpus: dict[str, GpuTarget]
    throttle: int | None = None
    image: str | None = None
    volume_claim: str = "envmatrix-reports"
    report_partition: str | None = None
    report_labels: tuple[str, ...] = ("ubuntu-latest",)
    report_account: str | None = None


@dataclass(frozen=True)
class Spec:
    """A validated matrix file."""

    path: str
    profiles: dict[str, Profile]
    scenarios: dict[str, Scenario] = field(default_factory=dict)


# ---- field checks: each returns an error fragment, or None when the value is fine -------------


def _offending(value: str, allowed: str) -> str:
    """The characters of `value` outside the character class `allowed`, quoted and sorted."""
    return ", ".join(repr(c) for c in sorted({c for c in value if not re.match(allowed, c)}))


def _bad_chars(value: str) -> str:
    return f"it contains {_offending(value, r'[A-Za-z0-9._+-]')}, characters never passed to a shell or a Dockerfile"


def check_version(value: str, example: str = "2.5.1") -> str | None:
    """PEP 440 release versions only, and nothing a shell or Dockerfile could interpret."""
    if len(value) > 64:
        return f"a version of {len(value)} characters; write a PEP 440 version such as {example}"
    if not _SAFE.fullmatch(value):
        return f"'{value}' is not a version: {_bad_chars(value)}; write a PEP 440 version such as {example}"
    try:
        Version(value)
    except InvalidVersion:
        return f"'{value}' is not a PEP 440 version; write one such as {example}"
    if not _PEP440.fullmatch(value):
        return f"'{value}' is not in canonical PEP 440 form; write one such as {example}"
    return None


def check_pattern(value: str) -> str | None:
    """An fnmatch pattern over names and versions: their characters plus `*`, `?` and brace lists."""
    allowed = r"[A-Za-z0-9._+*?{},/-]"
    if re.fullmatch(allowed + "+", value):
        bound = pattern_bounds(value)
        return f"'{value[:80]}': {bound}" if bound else None
    bad = _offending(value, allowed)
    return f"'{value}' is not a pattern: it contains {bad}; use names, versions, '*', '?' and {{a,b}}"


def _check_cuda(value: str) -> str | None:
    if value == "none":
        return None
    if not _SAFE.fullmatch(value):
        return f"'{value}' is not a CUDA version: {_bad_chars(value)}; write MAJOR.MINOR such as 12.4, or none"
    if not _CUDA.fullmatch(value):
        return f"'{value}' is not a CUDA version; write MAJOR.MINOR such as 12.4 (quote it), or none for CPU builds"
    return None


def _check_flash(value: str) -> str | None:
    return None if value == "none" else check_version(value, "2.7.4.post1")


def _check_python(value: str) -> str | None:
    if not _SAFE.fullmatch(value):
        return f"'{value}' is not a Python version: {_bad_chars(value)}; write 3.MINOR such as 3.11"
    return None if _PYTHON.fullmatch(value) else f"'{value}' is not a Python version; write 3.MINOR such as 3.11"


def _check_gpu(value: str) -> str | None:
    if value in catalog.GPUS:
        return None
    return f"unknown GPU '{value}'{_did_you_mean(value, list(catalog.GPUS))}; known: {', '.join(catalog.GPUS)}"


AXIS_CHECKS: dict[str, Callable[[str], str | None]] = {
    "cuda": _check_cuda,
    "torch": lambda v: check_version(v, "2.5.1"),
    "transformers": lambda v: check_version(v, "4.51.3"),
    "flash_attn": _check_flash,
    "gpu": _check_gpu,
    "python": _check_python,
}


#: A package axis' name: PEP 503 normalised (lower case, single '-' between runs), as ids and pins use it.
_PACKAGE = re.compile(r"[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?")
#: Names a package axis cannot take: the built-in axes (and their distribution names) and rule keys.
RESERVED_PACKAGES = ("cuda", "torch", "transformers", "flash-attn", "flash_attn", "gpu", "python", "scenario", "reason", "packages")


def check_profile_name(name: str) -> str | None:
    """A profile's name (the rule `_profile` applies to a file's profiles, for `--profile` before anything is written)."""
    if _NAME.fullmatch(name):
        return None
    return f"profile name {name[:80]!r} must be lower-case letters, digits, '.', '_' or '-' (at most 64, starting with a letter or digit)"


def check_package_name(name: str) -> str | None:
    """A package axis' name: its normalised distribution name, never a built-in axis."""
    if not _PACKAGE.fullmatch(name) or "--" in name:
        normal = re.sub(r"[-_.]+", "-", name).lower()
        hint = f"; write '{normal}'" if _PACKAGE.fullmatch(normal) else ""
        return f"'{name}' is not a package name: use its normalised distribution name (lower-case letters, digits, single '-'){hint}"
    if name in RESERVED_PACKAGES:
        return f"'{name}' is a built-in axis or key, not an extra package; declare it with the profile's own {name.replace('-', '_')}: field"
    return None


def check_package_version(value: str) -> str | None:
    """An extra package's pinned version, or `none` (not installed)."""
    return None if value == "none" else check_version(value, "1.16.0")


def _did_you_mean(word: str, choices: list[str]) -> str:
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return f" (did you mean '{lowered[word.lower()]}'?)"
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return f" (did you mean '{lowered[close[0]]}'?)" if close else ""


CHOICES: dict[str, tuple[str, ...]] = {
    "model": MODEL_FAMILIES,
    "dtype": ("fp32", "bf16", "fp16"),
    "attn": ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention"),
    "grad_ckpt": ("off", "reentrant", "non_reentrant"),
    "std": ("biased", "unbiased"),
    "saved_gen_config": ("none", "kwargs", "config"),
    "kernels": ("off", "auto", "reduced", "full"),
    "fault": ("none", "broken_attention", "no_softcap", "sigfpe", "drift"),
    "trainer": ("builtin", "trl"),
    "parallel": ("ddp", "zero2", "zero3", "fsdp2"),
    "expect": EXPECTABLE,
}
RANGES: dict[str, tuple[float, float]] = {
    "world_size": (1, 64),
    "num_generations": (1, 64),
    "temperature": (1e-6, 100.0),
    "top_p": (1e-9, 1.0),
    "top_k": (0, 100000),
    "steps": (1, 10000),
    "beta": (0.0, 100.0),
    "lr": (0.0, 10.0),
    "seed": (0, 2**31 - 1),
}
SCENARIO_FIELDS: dict[str, type] = {f.name: f.type if isinstance(f.type, type) else type(f.default) for f in fields(Scenario)}
SCENARIO_FIELDS.update({"expect": str, "name": str})
#: Set by `envmatrix preflight` for a user's model folder; a matrix file names built-in families only.
PREFLIGHT_FIELDS = ("shrink", "trust_remote_code")
for _name in PREFLIGHT_FIELDS:
    del SCENARIO_FIELDS[_name]


class Checker:
    """Walks the loaded document and collects every problem with its location."""

    def __init__(self, src: Source) -> None:
        self.src = src
        self.problems: list[str] = []

    def err(self, path: Path_, message: str) -> None:
        self.problems.append(f"{self.src.where(path)}: {message}")

    def mapping(self, value: Any, path: Path_, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.err(path, f"must be a mapping (key: value), got {kind_of(value)}")
            return {}
        for key in value:
            if key not in allowed:
                self.err((*path, key), f"unknown key '{key}'{_did_you_mean(key, list(allowed))}; allowed: {', '.join(allowed)}")
        for key in required:
            if key not in value:
                self.err(path, f"missing required key '{key}'")
        return {k: v for k, v in value.items() if k in allowed}

    def string_list(self, value: Any, path: Path_, check: Callable[[str], str | None] | None = None, *, allow_empty: bool = False) -> tuple[str, ...]:
        items = value if isinstance(value, list) else [value]
        if isinstance(value, (dict, bool)) or value is None:
            self.err(path, f"must be a list of values, got {kind_of(value)}")
            return ()
        if not items and not allow_empty:
            self.err(path, "is empty: an axis needs at least one value (a cell needs a value of every axis)")
            return ()
        out: list[str] = []
        for i, item in enumerate(items):
            ipath = (*path, i) if isinstance(value, list) else path
            if isinstance(item, (dict, list, bool)) or item is None:
                self.err(ipath, f"must be a single value, got {kind_of(item)}")
                continue
            text = str(item)
            problem = check(text) if check else None
            if problem:
                self.err(ipath, problem)
            elif text in out:
                self.err(ipath, f"duplicate value '{text}' (already at index {out.index(text)})")
            else:
                out.append(text)
        return tuple(out)

    def entries(self, value: Any, path: Path_) -> list[Any]:
        """An include/exclude list: a list of at most MAX_RULES entries (nothing is an empty list)."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.err(path, f"must be a list of entries (- {{axis: value, ...}}), got {kind_of(value)}")
            return []
        if len(value) > MAX_RULES:
            self.err(path, f"{len(value)} entries, more than {MAX_RULES}; use patterns ('*', '?') to say it in fewer")
            return []
        return value

    def scalar(self, name: str, value: Any, path: Path_) -> Any:
        """Convert one scenario field to its declared type, or record why it cannot be."""
        want = SCENARIO_FIELDS[name]
        if want is bool:
            if isinstance(value, bool):
                return value
            self.err(path, f"must be true or false, got {kind_of(value)} {value!r}")
            return None
        if want is str:
            if isinstance(value, (bool, dict, list)) or value is None:
                self.err(path, f"must be a str, got {kind_of(value)}")
                return None
            text = str(value)
            if name in CHOICES and text not in CHOICES[name]:
                self.err(path, f"'{text}' is not one of {', '.join(CHOICES[name])}{_did_you_mean(text, list(CHOICES[name]))}")
                return None
            return text
        lo, hi = RANGES.get(name, (float("-inf"), float("inf")))
        number, problem = number_problem(value, want, lo, hi, from_text=True)
        if problem:
            self.err(path, problem)
        return number


def _product(sizes: Any) -> int:
    total = 1
    for size in sizes:
        total *= size
    return total


TOP_KEYS = ("version", "profiles", "scenarios")
PROFILE_KEYS = (
    *AXES,
    "scenarios",
    "include",
    "exclude",
    "select",
    "skip",
    "build_from_source",
    "description",
    "base_images",
    "wheelhouse",
    "flash_attn_sources",
    "scheduler",
    "packages",
    "every_environment",
    "controls",
)
#: A profile's `controls:` values (plan/vetrule.py reads them).
CONTROL_MODES = ("all", "fewest")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}(@sha256:[a-f0-9]{64})?")
_PATH = re.compile(r"[A-Za-z0-9._/~+-]{1,1024}")
RULE_KEYS = (*AXES, "scenario", "reason")


def _scenarios(ck: Checker, raw: Any) -> dict[str, Scenario]:
    out: dict[str, Scenario] = {}
    if not isinstance(raw, dict) or not raw:
        ck.err(("scenarios",), "must be a non-empty mapping of scenario name → settings")
        return out
    allowed = tuple(n for n in SCENARIO_FIELDS if n != "name")
    for name, body in raw.items():
        path: Path_ = ("scenarios", name)
        if not _NAME.fullmatch(name):
            ck.err(path, f"scenario name '{name}' must be lower-case letters, digits, '.', '_' or '-' (it goes into cell ids)")
            continue
        body = {} if body is None else body
        values = ck.mapping(body, path, allowed)
        kwargs: dict[str, Any] = {}
        model = values.get("model")
        if isinstance(model, str) and model not in MODEL_FAMILIES and ("/" in model or model.startswith(".")):
            folder = _model_folder(ck, model, (*path, "model"))
            values = {k: v for k, v in values.items() if k != "model"}
            if folder is not None:
                kwargs |= {"model": folder, "shrink": True}
        for key, value in values.items():
            converted = ck.scalar(key, value, (*path, key))
            if converted is not None:
                kwargs[key] = converted
        if kwargs.get("use_vllm") and kwargs.get("trainer", "builtin") != "trl":
            ck.err((*path, "use_vllm"), "vLLM generation is a TRL option: set trainer: trl as well, or drop use_vllm")
        parallel = kwargs.get("parallel", "ddp")
        if parallel != "ddp" and kwargs.get("world_size", 1) < 2:
            ck.err((*path, "parallel"), f"parallel: {parallel} shards across ranks: set world_size: 2 or more, or use parallel: ddp")
        if kwargs.get("trainer") == "trl":
            for key, bad in (("fault", "sigfpe"), ("input_grad_hook", False)):
                if key in kwargs and kwargs[key] == bad:
                    ck.err((*path, key), f"trainer: trl does not apply {key}: {str(bad).lower()} (the built-in loop does); use trainer: builtin for it")
        out[name] = Scenario(name=name, **kwargs)
    return out


def _model_folder(ck: Checker, value: str, path: Path_) -> str | None:
    """`model: ./our-model`: a team's own architecture (config.json and tokenizer, no weights), relative to the matrix
    file, trained shrunk as `envmatrix preflight` does; its remote code never runs from a matrix file."""
    if not _PATH.fullmatch(value):
        ck.err(path, f"{value[:80]!r} is not a plain folder path (letters, digits, '.', '_', '/', '-')")
        return None
    folder = (Path(ck.src.name).parent / value).resolve()
    if not (folder / "config.json").is_file():
        ck.err(path, f"'{value}' is neither a built-in model family ({', '.join(MODEL_FAMILIES)}) nor a folder with a config.json ({folder})")
        return None
    return str(folder)


def _rule(ck: Checker, raw: Any, path: Path_, scenario_names: list[str], packages: tuple[str, ...] = ()) -> Rule | None:
    values = ck.mapping(raw, path, (*RULE_KEYS, *packages))
    match: list[tuple[str, tuple[str, ...]]] = []
    for key, value in values.items():
        if key == "reason":
            continue
        patterns = ck.string_list(value, (*path, key), check_pattern)
        if key == "scenario":
            for i, p in enumerate(patterns):
                if not any(re.fullmatch(_glob(p), s) for s in scenario_names):
                    ck.err((*path, key, i) if isinstance(value, list) else (*path, key), f"'{p}' matches no scenario{_did_you_mean(p, scenario_names)}")
        match.append((key, patterns))
    if not match:
        ck.err(path, f"a rule needs at least one of {', '.join(RULE_KEYS[:-1])}")
        return None
    return Rule(where=".".join(str(p) for p in path[:2]) + f".{path[2]}[{path[3]}]", match=tuple(match), reason=str(values.get("reason", "")))


def _glob(pattern: str) -> str:
    return re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")


def _profile(ck: Checker, name: str, raw: Any, scenarios: dict[str, Scenario]) -> Profile | None:
    path: Path_ = ("profiles", name)
    if not _NAME.fullmatch(name):
        ck.err(path, f"profile name '{name}' must be lower-case letters, digits, '.', '_' or '-'")
    values = ck.mapping(raw, path, PROFILE_KEYS, required=AXES)
    axes = {axis: ck.string_list(values[axis], (*path, axis), AXIS_CHECKS[axis]) for axis in AXES if axis in values}
    packages = _packages(ck, values.get("packages"), (*path, "packages"))
    names = list(scenarios)
    chosen = ck.string_list(values.get("scenarios", names), (*path, "scenarios"))
    for i, s in enumerate(chosen):
        if s not in scenarios:
            ck.err((*path, "scenarios", i), f"scenario '{s}' is not defined under scenarios:{_did_you_mean(s, names)}")
    include: list[dict[str, str]] = []
    purposes: list[tuple[str, ...]] = []
    for i, entry in enumerate(ck.entries(values.get("include"), (*path, "include"))):
        ipath = (*path, "include", i)
        body = ck.mapping(entry, ipath, (*AXES, *packages, "scenarios"))
        purpose = _scenario_patterns(ck, body.get("scenarios", []), (*ipath, "scenarios"), names)
        env: dict[str, str] = {}
        for axis in (*AXES, *packages):
            if axis in body:
                got = ck.string_list(body[axis], (*ipath, axis), AXIS_CHECKS.get(axis, check_package_version))
                if len(got) == 1:
                    env[axis] = got[0]
                elif got:
                    ck.err((*ipath, axis), "an include entry names one value per axis")
            elif len({**axes, **packages}.get(axis, ())) == 1:
                env[axis] = {**axes, **packages}[axis][0]
            else:
                ck.err(ipath, f"missing '{axis}' (the profile has several values for it; name one)")
        if len(env) == len(AXES) + len(packages):
            include.append(env)
            purposes.append(purpose)
    exclude = [_rule(ck, r, (*path, "exclude", i), names, tuple(packages)) for i, r in enumerate(ck.entries(values.get("exclude"), (*path, "exclude")))]
    patterns = {key: ck.string_list(values.get(key, []), (*path, key), check_pattern, allow_empty=True) for key in ("select", "skip", "every_environment")}
    patterns["every_environment"] = _scenario_patterns(ck, values.get("every_environment", []), (*path, "every_environment"), names)
    for key, pats in patterns.items():
        if len(pats) > MAX_PATTERNS:
            ck.err((*path, key), f"{len(pats)} patterns, more than {MAX_PATTERNS}; use '*' and brace lists to say it in fewer")
    cells = len(chosen) * (len(include) + _product(len(v) for v in axes.values()))
    if len(axes) == len(AXES) and cells > MAX_CELLS:
        ck.err(path, f"{cells:,} cells (axes × scenarios), more than {MAX_CELLS:,}; split it into profiles or narrow the axes")
    base_images: dict[str, str] = {}
    raw_images = values.get("base_images", {}) or {}
    if not isinstance(raw_images, dict):
        ck.err((*path, "base_images"), "must be a mapping of CUDA version (or none) → image reference")
    else:
        for cuda, image in raw_images.items():
            ipath = (*path, "base_images", cuda)
            problem = _check_cuda(cuda)
            if problem:
                ck.err(ipath, problem)
            elif not isinstance(image, str) or not _IMAGE.fullmatch(image):
                ck.err(ipath, f"{image!r} is not an image reference such as nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04[@sha256:<64 hex>]")
            else:
                base_images[cuda] = image
    wheelhouse = values.get("wheelhouse")
    if wheelhouse is not None and (not isinstance(wheelhouse, str) or not _PATH.fullmatch(wheelhouse)):
        ck.err((*path, "wheelhouse"), f"{wheelhouse!r} is not a plain folder path (letters, digits, '.', '_', '/', '-')")
        wheelhouse = None
    bfs = values.get("build_from_source", False)
    if not isinstance(bfs, bool):
        ck.err((*path, "build_from_source"), f"must be true or false, got {bfs!r}")
    scheduler = _scheduler(ck, values["scheduler"], (*path, "scheduler"), axes.get("gpu", ())) if "scheduler" in values else None
    fa_sources = ck.string_list(values.get("flash_attn_sources", flashsource.default_sources(wheelhouse, bfs is True)), (*path, "flash_attn_sources"))
    for problem in flashsource.check_sources(fa_sources, wheelhouse=wheelhouse, build_from_source=bfs is True):
        ck.err((*path, "flash_attn_sources"), problem)
    controls = values.get("controls", "all")
    if controls not in CONTROL_MODES:
        ck.err((*path, "controls"), f"{controls!r}: choose all (every planned control runs) or fewest (one per detector stack that needs one)")
    if len(axes) != len(AXES):
        return None
    return Profile(
        name=name,
        axes=axes,
        scenarios=tuple(s for s in chosen if s in scenarios),
        include=tuple(include),
        exclude=tuple(r for r in exclude if r is not None),
        select=patterns["select"],
        skip=patterns["skip"],
        build_from_source=bfs is True,
        description=str(values.get("description", "")),
        base_images=base_images,
        wheelhouse=wheelhouse,
        flash_attn_sources=tuple(fa_sources),
        scheduler=scheduler,
        packages=packages,
        every_environment=patterns["every_environment"],
        include_scenarios=tuple(purposes),
        controls=controls if controls in CONTROL_MODES else "all",
    )


def _scenario_patterns(ck: Checker, raw: Any, path: Path_, names: list[str]) -> tuple[str, ...]:
    """Scenario name patterns (fnmatch), each matching a defined scenario."""
    found = ck.string_list(raw, path, check_pattern, allow_empty=True)
    for i, p in enumerate(found):
        if not any(re.fullmatch(_glob(p), s) for s in names):
            ck.err((*path, i) if isinstance(raw, list) else path, f"'{p}' matches no scenario{_did_you_mean(p, names)}")
    return found


# Scheduler values are written into sbatch scripts, workflow YAML and manifests: each is matched in full
# against a pattern with no whitespace, quotes, '$', '`', ';' or braces before it gets there.
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}(,[A-Za-z0-9_.-]{1,64})*$")
_GRES = re.compile(r"^[A-Za-z0-9_.-]{1,64}(:[A-Za-z0-9_.-]{1,64}){0,2}(,[A-Za-z0-9_.-]{1,64}(:[A-Za-z0-9_.-]{1,64}){0,2})*$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.\-\[\]*&|:]{1,200}$")
_LABEL = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_K8S_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$")
_K8S_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
SCHEDULER_KEYS = ("gpus", "throttle", "image", "volume_claim", "report_partition", "report_labels", "report_account")
TARGET_KEYS = ("shards", "partition", "gres", "constraint", "labels", "product", "gpu_count", "cpus", "memory", "minutes", "account")
#: `memory:` of a scheduler target: whole gigabytes (`64G`) or terabytes (`1T`), as Slurm's --mem writes them.
_MEMORY = re.compile(r"^([1-9][0-9]{0,4})([GT])$")
#: The longest time limit a target may name (30 days); GitHub caps a job at 5 days (submit/__init__.py).
MAX_MINUTES = 30 * 24 * 60


def _sched_text(ck: Checker, value: Any, path: Path_, pattern: re.Pattern[str], example: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        ck.err(path, f"{value!r} is not allowed here: it is written into job scripts, so it must match {pattern.pattern} (e.g. {example})")
        return None
    return value


def _sched_int(ck: Checker, value: Any, path: Path_, lo: int, hi: int) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        ck.err(path, f"must be an integer in [{lo}, {hi}], got {value!r}")
        return None
    return value


def _sched_labels(ck: Checker, value: Any, path: Path_) -> tuple[str, ...]:
    return ck.string_list(value, path, lambda v: None if _LABEL.fullmatch(v) else f"runner label '{v}' must be letters, digits, '.', '_' or '-'")


def _sched_memory(ck: Checker, value: Any, path: Path_) -> int | None:
    """`64G` or `1T` → GB; None (and an error) for anything else, such as `64Gi`, `64000M` or a bare number."""
    if value is None:
        return None
    found = _MEMORY.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        ck.err(path, f"{value!r} is not a memory size: write whole gigabytes or terabytes such as 64G or 1T")
        return None
    return int(found[1]) * (1024 if found[2] == "T" else 1)


def default_labels(gpu: str) -> tuple[str, ...]:
    """The runner labels of a GPU type's jobs where the profile names none: self-hosted Linux runners labelled with it."""
    return ("self-hosted", "linux", gpu.lower())


def _scheduler(ck: Checker, raw: Any, path: Path_, gpus: tuple[str, ...]) -> Scheduler | None:
    values = ck.mapping(raw, path, SCHEDULER_KEYS, required=("gpus",))
    targets: dict[str, GpuTarget] = {}
    raw_gpus = values.get("gpus")
    if "gpus" in values and (not isinstance(raw_gpus, dict) or not raw_gpus):
        ck.err((*path, "gpus"), "must be a mapping of GPU type (from the profile's gpu axis) → where its shards run")
    elif isinstance(raw_gpus, dict):
        for gpu, body in raw_gpus.items():
            gpath = (*path, "gpus", gpu)
            if gpu not in gpus:
                ck.err(gpath, f"GPU type '{gpu}' is not on this profile's gpu axis{_did_you_mean(str(gpu), list(gpus))}; it has {', '.join(gpus)}")
                continue
            t = ck.mapping({} if body is None else body, gpath, TARGET_KEYS)
            targets[gpu] = GpuTarget(
                shards=_sched_int(ck, t.get("shards", 1), (*gpath, "shards"), 1, 1000) or 1,
                partition=_sched_text(ck, t.get("partition"), (*gpath, "partition"), _PARTITION, "gpu-a100"),
                gres=_sched_text(ck, t.get("gres"), (*gpath, "gres"), _GRES, "gpu:a100:8"),
                constraint=_sched_text(ck, t.get("constraint"), (*gpath, "constraint"), _CONSTRAINT, "a100&nvlink"),
                labels=_sched_labels(ck, t["labels"], (*gpath, "labels")) if "labels" in t else default_labels(gpu),
                product=_sched_text(ck, t.get("product"), (*gpath, "product"), _K8S_LABEL_VALUE, "NVIDIA-A100-SXM4-80GB"),
                gpu_count=_sched_int(ck, t.get("gpu_count", 0 if gpu == "cpu" else 1), (*gpath, "gpu_count"), 0, 64) or 0,
                cpus=_sched_int(ck, t["cpus"], (*gpath, "cpus"), 1, 1024) if "cpus" in t else None,
                mem_gb=_sched_memory(ck, t.get("memory"), (*gpath, "memory")),
                minutes=_sched_int(ck, t["minutes"], (*gpath, "minutes"), 1, MAX_MINUTES) if "minutes" in t else None,
                account=_sched_text(ck, t.get("account"), (*gpath, "account"), _ACCOUNT, "ml-team"),
            )
    throttle = _sched_int(ck, values["throttle"], (*path, "throttle"), 1, 1000) if "throttle" in values else None
    image = values.get("image")
    if image is not None and (not isinstance(image, str) or not _IMAGE.fullmatch(image)):
        ck.err((*path, "image"), f"{image!r} is not an image reference such as registry.example/envmatrix-probe:1.0[@sha256:<64 hex>]")
        image = None
    claim = _sched_text(ck, values.get("volume_claim", "envmatrix-reports"), (*path, "volume_claim"), _K8S_NAME, "envmatrix-reports")
    report_partition = _sched_text(ck, values.get("report_partition"), (*path, "report_partition"), _PARTITION, "cpu")
    report_account = _sched_text(ck, values.get("report_account"), (*path, "report_account"), _ACCOUNT, "ml-team")
    report_labels = _sched_labels(ck, values["report_labels"], (*path, "report_labels")) if "report_labels" in values else ("ubuntu-latest",)
    return Scheduler(
        gpus=targets,
        throttle=throttle,
        image=image,
        volume_claim=claim or "envmatrix-reports",
        report_partition=report_partition,
        report_labels=report_labels,
        report_account=report_account,
    )


def _packages(ck: Checker, raw: Any, path: Path_) -> dict[str, tuple[str, ...]]:
    """`packages: {trl: [0.19.1, 1.16.0], peft: [none, 0.15.2]}`: extra axes, checked like the built-in ones."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        ck.err(path, f"must be a mapping of package name → list of versions (or none), got {kind_of(raw)}")
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for name, versions in raw.items():
        name_text = str(name)
        problem = check_package_name(name_text)
        if problem:
            ck.err((*path, name_text), problem)
            continue
        got = ck.string_list(versions, (*path, name_text), check_package_version)
        if got:
            out[name_text] = got
    return dict(sorted(out.items()))


def parse(src: Source) -> Spec:
    """Validate a loaded document; raise SpecError listing every problem."""
    ck = Checker(src)
    # Top-level `x-…` keys are ignored (Compose's convention): a place for anchors such as `x-defaults: &d {...}`.
    extensions = tuple(k for k in src.data if k.startswith("x-")) if isinstance(src.data, dict) else ()
    top = ck.mapping(src.data, (), (*TOP_KEYS, *extensions), required=("profiles", "scenarios"))
    if "version" in top and top["version"] != 1:
        ck.err(("version",), f"unsupported matrix version {top['version']!r}; this envmatrix reads version 1")
    scenarios = _scenarios(ck, top.get("scenarios")) if "scenarios" in top else {}
    profiles: dict[str, Profile] = {}
    raw_profiles = top.get("profiles")
    if "profiles" in top and (not isinstance(raw_profiles, dict) or not raw_profiles):
        ck.err(("profiles",), "must be a non-empty mapping of profile name → axes")
    elif isinstance(raw_profiles, dict):
        for name, body in raw_profiles.items():
            prof = _profile(ck, name, body, scenarios)
            if prof is not None:
                profiles[name] = prof
    if ck.problems:
        raise SpecError(ck.problems)
    return Spec(path=src.name, profiles=profiles, scenarios=scenarios)


def load(path: str | Path) -> Spec:
    """Read and validate a matrix file."""
    return parse(load_yaml(Path(path)))


def load_text(text: str, name: str) -> Spec:
    """Validate a matrix file's text (one about to be written), errors named by `name`."""
    return parse(parse_yaml(text, name))
