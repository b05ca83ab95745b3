"""Pure: what each environment is vetted for, standing on its controls.

An environment (on a GPU type) is vetted for the healthy scenarios that were ok in it, and only where
at least one control reproduced its failure in that same environment on that GPU: a green cell means
something only where a detector was shown to work there. A scenario that fails in every environment
where it ran is a finding about the scenario, not a reason to vet nothing; it is listed apart.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

from ..plan.eligibility import NOT_APPLICABLE
from ..records.outcomes import Outcome
from ..records.record import CellInfo, Record, Status


@dataclass(frozen=True)
class Standing:
    """One environment on one GPU type: what it is vetted for, what fails in it, its controls."""

    env: str
    cell: CellInfo  # one of its cells: the axis values and build id
    scenarios: tuple[str, ...]  # healthy scenarios ok here
    fails: tuple[str, ...]  # healthy scenarios that ran here and were not ok
    controls: int  # controls that reproduced here
    controls_ran: int
    not_applicable: tuple[str, ...] = ()  # scenarios skipped here by the profile's design

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
        """Vetted for something: a healthy scenario ok, and a detector proven in this environment."""
        return bool(self.scenarios) and self.controls > 0

    def why_not(self) -> str:
        """Why the environment is vetted for nothing ('' when it is vetted)."""
        if not self.scenarios:
            return "no healthy scenario was ok here"
        if not self.controls:
            return f"no control reproduced here ({self.controls_ran} ran), so no detector was shown to work"
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
        }


def standings(records: list[Record]) -> list[Standing]:
    """Every environment id (environment × GPU) that ran something, in id order."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for rec in records:
        groups[rec.env].append(rec)
    out = []
    for env_id, recs in sorted(groups.items()):
        ran = [r for r in recs if r.status != Status.SKIPPED]
        if not ran:
            continue
        healthy = [r for r in ran if not r.expect]
        controls = [r for r in ran if r.expect]
        out.append(
            Standing(
                env=env_id,
                cell=ran[0].cell,
                scenarios=tuple(r.cell.scenario for r in healthy if r.klass == Outcome.OK),
                fails=tuple(r.cell.scenario for r in healthy if r.klass != Outcome.OK),
                controls=sum(r.control == "reproduced" for r in controls),
                controls_ran=len(controls),
                not_applicable=tuple(r.cell.scenario for r in recs if not_applicable(r)),
            )
        )
    return out


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
        if r.status != Status.SKIPPED and not r.expect:
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
    ran = {r.cell.scenario for r in records if r.cell.gpu == gpu and r.status != Status.SKIPPED and not r.expect}
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
