"""Pure: what each environment is vetted for, standing on its controls.

An environment (on a GPU type) is vetted for the healthy scenarios that were ok in it, each only where a
control reproduced its failure on the same detector stack (plan/vetrule.py: GPU × CUDA × torch × flash-attn,
plus TRL/accelerate or DeepSpeed where the scenario trains through them): a green cell means something only
where a detector was shown to work on what that cell ran on. The planner plans controls by the same rule.
A scenario that fails in every environment where it ran is a finding about the scenario, not a reason to
vet nothing; it is listed apart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..plan.eligibility import NOT_APPLICABLE
from ..plan.vetrule import Stack, scenario_from_settings, stack_of
from ..records.outcomes import Outcome
from ..records.record import CellInfo, Record, Status


@dataclass(frozen=True)
class Standing:
    """One environment on one GPU type: what it is vetted for, what fails in it, its controls."""

    env: str
    cell: CellInfo  # one of its cells: the axis values and build id
    scenarios: tuple[str, ...]  # healthy scenarios ok here, on a detector stack a control vetted
    fails: tuple[str, ...]  # healthy scenarios that ran here and were not ok
    controls: int  # controls that reproduced in this environment
    controls_ran: int  # controls that ran in it
    not_applicable: tuple[str, ...] = ()  # scenarios skipped here by the profile's design
    unvetted: tuple[str, ...] = ()  # healthy scenarios ok here with no reproduced control on their detector stack
    vetted_by: tuple[str, ...] = ()  # the control cells (here or beside it) that vet its scenarios

    @property
    def gpu(self) -> str:
        return self.cell.gpu

    @property
    def python(self) -> str:
        return self.cell.python

    @property
    def healthy(self) -> int:
        return len(self.scenarios)

    @property
    def vetted(self) -> bool:
        """Vetted for something: a healthy scenario ok on a detector stack a control proved."""
        return bool(self.scenarios)

    def why_not(self) -> str:
        """Why the environment is vetted for nothing ('' when it is vetted)."""
        if not self.scenarios and not self.unvetted:
            return "no healthy scenario was ok here"
        if not self.scenarios:
            return f"no control reproduced on its detector stack ({self.controls_ran} ran here), so no detector was shown to work"
        return ""

    def as_dict(self) -> dict[str, object]:
        return {
            "env": self.env,
            "build": self.cell.build,
            **self.cell.axes(),
            "packages": dict(self.cell.packages),
            "scenarios": list(self.scenarios),
            "fails": list(self.fails),
            "controls": self.controls,
            "controls_ran": self.controls_ran,
            "healthy": self.healthy,
            "unvetted": list(self.unvetted),
            "vetted_by": list(self.vetted_by),
        }


def standings(records: list[Record]) -> list[Standing]:
    """Every environment id (environment × GPU) that ran something, in id order."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for rec in records:
        groups[rec.env].append(rec)
    controls: dict[Stack, list[Record]] = defaultdict(list)
    for rec in records:
        if rec.expect and rec.status != Status.SKIPPED:
            controls[record_stack(rec)].append(rec)
    out = []
    for env_id, recs in sorted(groups.items()):
        ran = [r for r in recs if r.status != Status.SKIPPED]
        if not ran:
            continue
        healthy = [r for r in ran if r.workload]
        ok = [r for r in healthy if r.klass == Outcome.OK]
        own = [r for r in ran if r.expect]
        # a control that failed here says the detector is broken here, whatever reproduced elsewhere on the stack
        broken = {record_stack(r) for r in own if r.control != "reproduced"}
        stacks = {record_stack(r) for r in ok} - broken
        proven = {s for s in stacks if any(c.control == "reproduced" for c in controls.get(s, []))}
        out.append(
            Standing(
                env=env_id,
                cell=ran[0].cell,
                scenarios=tuple(r.cell.scenario for r in ok if record_stack(r) in proven),
                fails=tuple(r.cell.scenario for r in healthy if r.klass != Outcome.OK),
                controls=sum(r.control == "reproduced" for r in own),
                controls_ran=len(own),
                not_applicable=tuple(r.cell.scenario for r in recs if not_applicable(r)),
                unvetted=tuple(r.cell.scenario for r in ok if record_stack(r) not in proven),
                vetted_by=tuple(sorted({c.cell.id for s in proven for c in controls[s] if c.control == "reproduced"})),
            )
        )
    return out


def record_stack(record: Record) -> Stack:
    """A record's detector stack, by the planner's rule (plan/vetrule.py)."""
    cell = record.cell
    return stack_of(cell.axes(), cell.packages, scenario_from_settings(cell.scenario, cell.scenario_settings))


def not_applicable(record: Record) -> bool:
    """A cell skipped by the profile's design (its scenario needs a package the environment lacks, or an
    exclude rule), as opposed to one skipped for a compatibility reason."""
    kinds = set(record.outcome.rule.split(","))
    return record.status == Status.SKIPPED and bool(kinds) and kinds <= set(NOT_APPLICABLE)


def fold_text(ran: int, na: int) -> str:
    """An environment's folded line: `5 scenarios run; 14 not applicable` (the by-design skips folded away)."""
    return f"{ran} scenario{'' if ran == 1 else 's'} run" + (f"; {na} not applicable" if na else "")


def vetted_environments(records: list[Record]) -> list[Standing]:
    """The environments vetted for at least one scenario, in id order."""
    return [s for s in standings(records) if s.vetted]


def failing_everywhere(records: list[Record]) -> dict[str, list[str]]:
    """Per GPU type, the healthy scenarios that ran in more than one environment and were ok in none."""
    ran: dict[tuple[str, str], set[str]] = defaultdict(set)
    ok: dict[tuple[str, str], bool] = defaultdict(bool)
    for r in records:
        if r.status != Status.SKIPPED and r.workload:
            key = (r.cell.gpu, r.cell.scenario)
            ran[key].add(r.env)
            ok[key] |= r.klass == Outcome.OK
    out: dict[str, list[str]] = defaultdict(list)
    for (gpu, scenario), envs in sorted(ran.items()):
        if len(envs) > 1 and not ok[(gpu, scenario)]:
            out[gpu].append(scenario)
    return dict(out)


def required(records: list[Record], gpu: str) -> list[str]:
    """The default workload on a GPU type: every healthy scenario that ran there and does not fail everywhere."""
    everywhere = set(failing_everywhere(records).get(gpu, []))
    ran = {r.cell.scenario for r in records if r.cell.gpu == gpu and r.status != Status.SKIPPED and r.workload}
    return sorted(ran - everywhere)


def _version(text: str) -> Version:
    try:
        return Version("0" if text == "none" else text)
    except InvalidVersion:
        return Version("0")


def _key(entry: Standing) -> tuple[object, ...]:
    c = entry.cell
    packages = tuple(_version(v) for _, v in sorted(c.packages.items()))
    return (_version(c.torch), _version(c.transformers), _version(c.flash_attn), _version(c.cuda), entry.healthy, packages)


def ruled_out(entry: Standing, scenarios: list[str], explicit: bool) -> list[str]:
    """What keeps an environment from serving a workload: each scenario not vetted there (with why), or
    its missing controls. Scenarios not applicable to it by design are not asked of it unless named."""
    if not entry.vetted:
        return [entry.why_not()]
    missing = []
    for s in scenarios:
        if s in entry.scenarios:
            continue
        if s in entry.fails:
            missing.append(f"{s} fails here")
        elif s in entry.unvetted:
            missing.append(f"{s} was ok here, but no control reproduced on its detector stack")
        elif explicit or s not in entry.not_applicable:
            missing.append(f"{s} did not run here" if s not in entry.not_applicable else f"{s} does not apply here")
    return missing


def best(records: list[Record], gpu: str, scenarios: list[str] | None = None) -> tuple[Standing | None, list[str], dict[str, list[str]]]:
    """The newest environment on a GPU type vetted for a workload (torch, then transformers, flash-attn,
    CUDA, then the most scenarios, then newer packages): the choice, the workload asked, and for each
    environment left out what rules it out."""
    explicit = bool(scenarios)
    wanted = list(scenarios) if scenarios else required(records, gpu)
    candidates = [s for s in standings(records) if s.gpu == gpu]
    reasons = {c.env: ruled_out(c, wanted, explicit) for c in candidates}
    fit = [c for c in candidates if not reasons[c.env]]
    return (max(fit, key=_key) if fit else None), wanted, {k: v for k, v in reasons.items() if v}


def newest(entries: list[Standing]) -> Standing | None:
    """The newest of some environments, in the order `best` ranks them (None for none)."""
    return max(entries, key=_key) if entries else None
