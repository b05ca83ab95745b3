"""THE eligibility: whether a cell runs, and every reason it does not.

plan, run, bisect, doctor, submit and preflight all judge a cell here, so a cell skipped in one is
skipped in all with the same words. Each reason has a kind, so reports can tell a compatibility
fact (`catalog`, `packages`, `family`, `host`, `resolver`) from a cell that is not applicable by the
profile's design (`needs`: the scenario needs a package the environment does not install;
`excluded`: an exclude rule of the profile).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..facts import catalog, families, pkgconstraints
from ..spec.matrix import Profile, Rule, Scenario
from .cells import PLANNED, SKIPPED, Cell, Environment

CATALOG = "catalog"  # no wheel, no kernels, no build for this combination (facts/catalog.py)
PACKAGES = "packages"  # a pinned package's own metadata rules the environment out
FAMILY = "family"  # the model family is not in this transformers release
NEEDS = "needs"  # the scenario needs a package this environment does not install
EXCLUDED = "excluded"  # an exclude rule of the profile
HOST = "host"  # this runner cannot give the cell what it needs (GPUs)
RESOLVER = "resolver"  # the package indexes cannot satisfy the environment's pins
VETTING = "vetting"  # a control another control's run makes unneeded (plan/vetrule.py, `controls: fewest`)
KINDS = (CATALOG, PACKAGES, FAMILY, NEEDS, EXCLUDED, HOST, RESOLVER, VETTING)
#: Kinds that say a cell does not apply by the profile's design rather than that something is incompatible.
NOT_APPLICABLE = (NEEDS, EXCLUDED, VETTING)


@dataclass(frozen=True)
class Reason:
    """Why a cell does not run: its kind and the words a user acts on."""

    kind: str
    text: str


def environment_reasons(profile: Profile, env: Environment) -> list[Reason]:
    """Why an environment cannot be built as declared: the catalog, then the pinned packages' metadata."""
    # A wheelhouse may hold wheels the releases page lacks: its coverage is then checked at install time.
    off_page = profile.build_from_source or "wheelhouse" in profile.flash_attn_sources
    reasons = [Reason(CATALOG, r) for r in catalog.environment_reasons(**env.axes(), build_from_source=off_page)]
    return reasons + [Reason(PACKAGES, r) for r in pkgconstraints.environment_reasons(env)]


def scenario_reasons(profile: Profile, env: Environment, scenario: Scenario) -> list[Reason]:
    """Why a scenario cannot run in an (installable) environment: hardware, family, needed packages, exclude rules."""
    reasons = [Reason(CATALOG, r) for r in catalog.scenario_reasons(attn=scenario.attn, dtype=scenario.dtype, flash_attn=env.flash_attn, gpu=env.gpu)]
    if scenario.model in families.FAMILIES and (missing := families.missing_reason(scenario.model, env.transformers)):
        reasons.append(Reason(FAMILY, missing))
    reasons += [Reason(NEEDS, r) for r in pkgconstraints.scenario_reasons(env, scenario)]
    purpose = included_for(profile, env)
    if purpose is not None and not any(fnmatch.fnmatchcase(scenario.name, p) for p in purpose[1]):
        reasons.append(Reason(EXCLUDED, f"{purpose[0]} adds this environment for {', '.join(purpose[1])} only"))
    for rule in profile.exclude:
        if rule_matches(rule, env, scenario):
            reasons.append(Reason(EXCLUDED, f"excluded by {rule.where}" + (f": {rule.reason}" if rule.reason else "")))
    return reasons


#: Package axes a scenario depends on beyond the packages it cannot run without (pkgconstraints.needed_packages):
#: TRL trains through accelerate (its Trainer, and accelerate's DeepSpeed and FSDP plugins); LoRA is peft's.
RUNS_THROUGH: dict[str, tuple[str, ...]] = {"trl": ("accelerate",)}
#: Every package `depends_on` can name: a package axis outside these is not tied to any scenario field.
SCENARIO_PACKAGES: frozenset[str] = frozenset({"trl", "deepspeed", *pkgconstraints.VLLM_DISTRIBUTION.values(), *RUNS_THROUGH["trl"], "peft"})


def depends_on(scenario: Scenario, gpu: str) -> tuple[str, ...]:
    """THE package axes whose value can change this scenario's outcome (sorted): trainer trl → trl, accelerate;
    parallel zero2/zero3 → deepspeed; use_vllm → vLLM's distribution for the runner; LoRA → peft; the built-in
    loop alone → none. The environment's own axes (cuda, torch, transformers, flash_attn, gpu, python) always
    count. Read by plan (which cells one run covers: plan/cover.py), run, and the follow-up questions (watch,
    bisect) that ask which releases a scenario can tell apart. A package's own dependencies that it brings in
    unpinned are not axes: the freeze in each record says what was installed."""
    needed = set(pkgconstraints.needed_packages(scenario, gpu))
    needed |= {more for name in list(needed) for more in RUNS_THROUGH.get(name, ())}
    if scenario.lora:
        needed.add("peft")
    return tuple(sorted(needed))


def included_for(profile: Profile, env: Environment) -> tuple[str, tuple[str, ...]] | None:
    """Where an environment comes only from include entries that name their scenarios: (where, the patterns);
    None for an environment of the axes' product or of an entry that names none (every scenario applies)."""
    values = {**env.axes(), **dict(env.packages)}
    if all(values.get(axis) in choices for axis, choices in (*profile.axes.items(), *profile.packages.items())):
        return None
    patterns: list[str] = []
    where: list[str] = []
    for i, entry in enumerate(profile.include):
        if entry == values:
            named = profile.include_scenarios[i] if i < len(profile.include_scenarios) else ()
            if not named:
                return None
            patterns += named
            where.append(f"profiles.{profile.name}.include[{i}]")
    return (" and ".join(where), tuple(dict.fromkeys(patterns))) if where else None


def host_reasons(env: Environment, scenario: Scenario, gpu_count: int | None, driver: str | None = None) -> list[Reason]:
    """What this runner lacks for the cell: a driver new enough for its CUDA build, GPUs for its ranks (on the
    CPU, ranks share it over gloo). `gpu_count` None: not judged for a host (planning for another machine)."""
    if gpu_count is None or env.gpu == "cpu":
        return []
    reasons = []
    if driver is not None and (low := driver_too_old(env.cuda, driver)):
        reasons.append(Reason(HOST, low))
    if scenario.world_size > gpu_count:
        reasons.append(Reason(HOST, f"needs {scenario.world_size} {env.gpu} GPUs; this runner has {gpu_count}"))
    return reasons


def driver_too_old(cuda: str, driver: str) -> str | None:
    """Why a CUDA build cannot run on a driver (the catalog's minimum for its CUDA major), or None."""
    needed = catalog.min_driver(cuda)
    try:
        if needed is None or Version(driver) >= Version(needed):
            return None
    except InvalidVersion:
        return None  # a driver string nvidia-smi did not give as a version: the run will tell
    major = cuda.split(".")[0]
    return f"CUDA {cuda} builds need an NVIDIA driver ≥ {needed} (CUDA {major}.x, {catalog.CUDA_DRIVER_SOURCE.where}); this host's driver is {driver}"


def judge(
    profile: Profile,
    env: Environment,
    scenario: Scenario,
    *,
    gpu_count: int | None = None,
    driver: str | None = None,
    installed: bool = False,
    env_reasons: list[Reason] | None = None,
) -> Cell:
    """The cell of a scenario in an environment: planned, or skipped with every reason and its kinds.
    `installed`: the environment exists already (doctor), so whether it could be built is not asked;
    `env_reasons`: environment_reasons(profile, env) when the caller judges many scenarios of one environment."""
    if installed:
        env_reasons = []
    elif env_reasons is None:
        env_reasons = environment_reasons(profile, env)
    found = env_reasons + scenario_reasons(profile, env, scenario) + host_reasons(env, scenario, gpu_count, driver)
    if not found:
        return Cell(env, scenario, PLANNED)
    return Cell(env, scenario, SKIPPED, "; ".join(r.text for r in found), tuple(dict.fromkeys(r.kind for r in found)))


def rule_matches(rule: Rule, env: Environment, scenario: Scenario) -> bool:
    """Whether an include/exclude rule matches a cell (fnmatch patterns over axes, packages and the scenario)."""
    values = {**env.axes(), **dict(env.packages), "scenario": scenario.name}
    return all(any(fnmatch.fnmatchcase(values.get(key, "none"), p) for p in pats) for key, pats in rule.match)
