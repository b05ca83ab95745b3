"""Pure expansion: a profile → cells (environment × scenario) with stable ids, statuses and reasons.

Cells the catalog or an exclude rule rules out stay in the list as `skipped` with the reason; only
the user's own select/skip patterns (matrix.yaml or --only/--skip) narrow the list.
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InputError
from ..facts import catalog, families, pkgconstraints
from ..spec.matrix import AXES, Profile, Rule, Scenario, Spec
from ..spec.patterns import PatternError, compile_selection

PLANNED = "planned"
SKIPPED = "skipped"


@dataclass(frozen=True)
class Environment:
    """One value of every environment axis: what an image or venv is built from (plus the GPU it runs on)."""

    cuda: str
    torch: str
    transformers: str
    flash_attn: str
    gpu: str
    python: str
    #: Extra package axes, sorted by name: (`trl`, `1.16.0`); `none` means not installed.
    packages: tuple[tuple[str, str], ...] = ()

    @property
    def cuda_tag(self) -> str:
        """`cu124`, or `cpu` for CPU builds of torch."""
        return "cpu" if self.cuda == "none" else "cu" + self.cuda.replace(".", "")

    @property
    def build_id(self) -> str:
        """What one image/venv is keyed by: the GPU is where it runs, not what it is built from."""
        fa = "fanone" if self.flash_attn == "none" else f"fa{self.flash_attn}"
        return f"{self.cuda_tag}-torch{self.torch}-tf{self.transformers}-{fa}{self._packages_id}-py{self.python}"

    @property
    def id(self) -> str:
        """e.g. `cu124-torch2.5.1-tf4.49.0-fa2.7.4.post1-h20-py3.11`."""
        fa = "fanone" if self.flash_attn == "none" else f"fa{self.flash_attn}"
        return f"{self.cuda_tag}-torch{self.torch}-tf{self.transformers}-{fa}{self._packages_id}-{self.gpu.lower()}-py{self.python}"

    @property
    def _packages_id(self) -> str:
        """`-trl1.16.0-peft0.15.2` (name order); packages not installed add nothing, so an environment
        without extra packages keeps the id it had before package axes existed."""
        return "".join(f"-{name}{'_' if name[-1].isdigit() else ''}{version}" for name, version in self.packages if version != "none")

    def package(self, name: str) -> str:
        """The version of an extra package in this environment, `none` when it is not installed."""
        return dict(self.packages).get(name, "none")

    def axes(self) -> dict[str, str]:
        """The axis values as a plain mapping (records and reports)."""
        return {axis: getattr(self, axis) for axis in AXES}

    @classmethod
    def from_values(cls, values: dict[str, str]) -> Environment:
        """An environment from one value per axis; every other key is an extra package."""
        return cls(**{a: values[a] for a in AXES}, packages=tuple(sorted((k, v) for k, v in values.items() if k not in AXES)))


@dataclass(frozen=True)
class Cell:
    """A scenario in an environment: the unit that runs, is recorded and is reported."""

    env: Environment
    scenario: Scenario
    status: str = PLANNED
    reason: str = ""

    @property
    def id(self) -> str:
        """`<environment id>/<scenario name>`: stable across runs, readable, usable as a file stem."""
        return f"{self.env.id}/{self.scenario.name}"

    def as_dict(self) -> dict[str, object]:
        """The plan's JSON form."""
        return {
            "id": self.id,
            "env": self.env.id,
            "build": self.env.build_id,
            **self.env.axes(),
            "packages": dict(self.env.packages),
            "scenario": self.scenario.name,
            "expect": self.scenario.expect,
            "status": self.status,
            "reason": self.reason,
        }


def matches(cell_id: str, patterns: Iterable[str]) -> bool:
    """Whether a cell id matches any fnmatch pattern (braces expand: `*/{fp32,bf16}-sdpa`)."""
    compiled = compile_selection(patterns)
    return compiled is not None and compiled.match(cell_id) is not None


def _rule_matches(rule: Rule, env: Environment, scenario: Scenario) -> bool:
    values = {**env.axes(), **dict(env.packages), "scenario": scenario.name}
    return all(any(fnmatch.fnmatchcase(values[key], p) for p in pats) for key, pats in rule.match)


def environments(profile: Profile) -> list[Environment]:
    """The cartesian product of the axes, then the include entries, without repeats, in a stable order."""
    names = (*AXES, *profile.packages)
    values = [*(profile.axes[a] for a in AXES), *profile.packages.values()]
    product = [Environment.from_values(dict(zip(names, combo, strict=True))) for combo in itertools.product(*values)]
    extra = [Environment.from_values(inc) for inc in profile.include]
    return list(dict.fromkeys(product + extra))


def expand(spec: Spec, profile_name: str, *, only: Iterable[str] = (), skip: Iterable[str] = (), gpu: str | None = None) -> list[Cell]:
    """All cells of a profile, with catalog and exclude-rule skips, narrowed by select/skip patterns and GPU."""
    profile = spec.profiles[profile_name]
    try:
        select = compile_selection((*profile.select, *only))
        unselect = compile_selection((*profile.skip, *skip))
    except PatternError as exc:
        raise InputError(f"selection: {exc}") from None
    cells: list[Cell] = []
    for env in environments(profile):
        if gpu is not None and env.gpu != gpu:
            continue
        # A wheelhouse may hold wheels the releases page lacks: its coverage is then checked at install time.
        off_page = profile.build_from_source or "wheelhouse" in profile.flash_attn_sources
        env_reasons = catalog.environment_reasons(**env.axes(), build_from_source=off_page)
        for name in profile.scenarios:
            scenario = spec.scenarios[name]
            cell = Cell(env, scenario)
            if select is not None and not select.match(cell.id):
                continue
            if unselect is not None and unselect.match(cell.id):
                continue
            reasons = list(env_reasons)
            reasons += catalog.scenario_reasons(attn=scenario.attn, dtype=scenario.dtype, flash_attn=env.flash_attn, gpu=env.gpu)
            if scenario.model in families.FAMILIES and (missing := families.missing_reason(scenario.model, env.transformers)):
                reasons.append(missing)
            reasons += pkgconstraints.cell_reasons(env, scenario)
            for rule in profile.exclude:
                if _rule_matches(rule, env, scenario):
                    reasons.append(f"excluded by {rule.where}" + (f": {rule.reason}" if rule.reason else ""))
            if reasons:
                cell = Cell(env, scenario, SKIPPED, "; ".join(reasons))
            cells.append(cell)
    return cells
