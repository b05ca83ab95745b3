"""Pure expansion: a profile → cells (environment × scenario) with stable ids, statuses and reasons.

Cells the eligibility rules out stay in the list as `skipped` with the reason, and cells another cell's run
covers as `covered` (plan/cover.py); only the user's own select/skip patterns (matrix.yaml or --only/--skip)
and the GPU narrow the list.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from ..errors import InputError
from ..host.gpus import HostGpus
from ..spec.matrix import AXES, Profile, Spec
from ..spec.patterns import PatternError, compile_selection
from .cells import Cell, Environment
from .cover import cover
from .eligibility import environment_reasons, judge
from .vetrule import plan_controls, vetted_by


def environments(profile: Profile) -> list[Environment]:
    """The cartesian product of the axes, then the include entries, without repeats, in a stable order."""
    names = (*AXES, *profile.packages)
    values = [*(profile.axes[a] for a in AXES), *profile.packages.values()]
    product = [Environment.from_values(dict(zip(names, combo, strict=True))) for combo in itertools.product(*values)]
    extra = [Environment.from_values(inc) for inc in profile.include]
    return list(dict.fromkeys(product + extra))


def expand(
    spec: Spec,
    profile_name: str,
    *,
    only: Iterable[str] = (),
    skip: Iterable[str] = (),
    gpu: str | None = None,
    host: HostGpus | None = None,
) -> list[Cell]:
    """All cells of a profile judged by the one eligibility, narrowed by select/skip patterns and GPU type.
    `host`: this machine, when the plan is for it: the cells of its GPU types are judged against how many
    GPUs of their type it has, and its driver (cells of other GPU types are for other runners)."""
    profile = spec.profiles[profile_name]
    try:
        select = compile_selection((*profile.select, *only))
        unselect = compile_selection((*profile.skip, *skip))
    except PatternError as exc:
        raise InputError(f"selection: {exc}") from None
    types = host.types() if host is not None else {}  # a mixed host: each cell judged by the GPUs of its type
    cells: list[Cell] = []
    for env in environments(profile):
        if gpu is not None and env.gpu != gpu:
            continue
        env_reasons = None
        for name in profile.scenarios:
            scenario = spec.scenarios[name]
            cell_id = Cell(env, scenario).id
            if (select is not None and not select.match(cell_id)) or (unselect is not None and unselect.match(cell_id)):
                continue
            env_reasons = environment_reasons(profile, env) if env_reasons is None else env_reasons
            ids = types.get(env.gpu)
            count, driver = (len(ids), host.driver) if host is not None and ids else (None, None)
            cells.append(judge(profile, env, scenario, gpu_count=count, driver=driver, env_reasons=env_reasons))
    return vetted_by(cover(profile, plan_controls(profile, cells)))
