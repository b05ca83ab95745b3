"""THE rule of which controls vet which cells: vetting and economy are one rule.

A control (a scenario with `expect:`) that reproduces its failure proves the detector works on the stack it ran
on, and only there. That stack is the part of the environment the detector's evidence passes through:

- the attention stack: GPU type × CUDA build × torch × flash-attn (the kernels every number goes through);
- the trainer stack: TRL and accelerate for `trainer: trl` (their loop logs the metrics the verdict reads);
  nothing for the built-in loop;
- the engine: DeepSpeed for ZeRO (it shards, gathers and reports the gradients); FSDP2 is torch's own, so its
  stack is the attention stack's torch.

So a healthy cell is vetted by a control that reproduced on the same detector stack (`stack_of`), whatever
transformers, Python or other packages differ. The planner (`plan_controls`) reads this rule to plan controls
(with `controls: fewest`, one control per detector stack that a healthy planned cell needs), `plan` shows for
each healthy cell the control that vets it or says that none can, and outputs/vetting.py judges records by the
same `stack_of`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from ..spec.matrix import CONTROL_MODES, Profile, Scenario
from .cells import PLANNED, SKIPPED, Cell
from .eligibility import VETTING, depends_on

#: The package axes of the detector's stack beyond the attention stack: the trainer stack and the engine.
DETECTOR_PACKAGES: frozenset[str] = frozenset({"trl", "accelerate", "deepspeed"})
#: The `controls:` value (spec/matrix.py validates CONTROL_MODES) that plans the fewest controls that vet; with
#: the other, `all`, every planned control runs (covered where cover.py says so).
FEWEST = CONTROL_MODES[1]


@dataclass(frozen=True)
class Stack:
    """What a control's reproduction proves the detector on: the attention stack, then the trainer/engine packages."""

    gpu: str
    cuda: str
    torch: str
    flash_attn: str
    packages: tuple[tuple[str, str], ...] = ()

    def text(self) -> str:
        """`H20 · cu121 torch 2.5.1 · flash-attn 2.7.4.post1 · trl 1.16.0, accelerate none` in words."""
        cuda = "cpu" if self.cuda == "none" else "cu" + self.cuda.replace(".", "")
        fa = "no flash-attn" if self.flash_attn == "none" else f"flash-attn {self.flash_attn}"
        rest = ", ".join(f"{n} {v}" for n, v in self.packages) or "built-in loop"
        return f"{self.gpu} · {cuda} torch {self.torch} · {fa} · {rest}"


def stack_of(axes: Mapping[str, str], packages: Mapping[str, str], scenario: Scenario) -> Stack:
    """THE detector stack of a scenario in an environment (axes: gpu, cuda, torch, flash_attn; packages: name →
    version or none): the packages are those of DETECTOR_PACKAGES the scenario depends on (eligibility.depends_on)."""
    gpu = axes["gpu"]
    names = sorted(set(depends_on(scenario, gpu)) & DETECTOR_PACKAGES)
    return Stack(gpu, axes["cuda"], axes["torch"], axes["flash_attn"], tuple((n, packages.get(n, "none")) for n in names))


def cell_stack(cell: Cell) -> Stack:
    """The detector stack of a planned cell."""
    return stack_of(cell.env.axes(), dict(cell.env.packages), cell.scenario)


def scenario_from_settings(name: str, settings: Mapping[str, Any]) -> Scenario:
    """A record's scenario rebuilt from its settings (the fields the rule reads; records without settings
    are read as the built-in loop on DDP)."""
    read = ("trainer", "parallel", "use_vllm", "lora")
    picked = {k: v for k, v in settings.items() if k in read and k in {f.name for f in fields(Scenario)}}
    return replace(Scenario(name), **picked)


def plan_controls(profile: Profile, cells: list[Cell]) -> list[Cell]:
    """With `controls: fewest`, the planned controls kept to one per detector stack that a healthy planned cell
    needs (the first in plan order); every other planned control is skipped with the reason (kind `vetting`).
    With `controls: all`, the cells as they are. Pure; the plan's order is kept."""
    if profile.controls != FEWEST:
        return cells
    needed = {cell_stack(c) for c in cells if c.status == PLANNED and not c.scenario.expect}
    chosen: dict[Stack, str] = {}
    out = list(cells)
    for i, cell in enumerate(cells):
        if cell.status != PLANNED or not cell.scenario.expect:
            continue
        stack = cell_stack(cell)
        if stack in needed and stack not in chosen:
            chosen[stack] = cell.id
            continue
        why = (
            f"not needed to vet: {chosen[stack]} vets this detector stack ({stack.text()})"
            if stack in chosen
            else f"not needed to vet: no healthy cell runs on this detector stack ({stack.text()})"
        )
        out[i] = replace(cell, status=SKIPPED, reason=why, kinds=(VETTING,))
    return out


def vetted_by(cells: list[Cell]) -> list[Cell]:
    """Each healthy planned or covered cell with the control that vets it (the first planned control on its
    detector stack), or with `unvetted` saying why none can: the candidates on its stack and why they do not run."""
    runs: dict[Stack, str] = {}
    blocked: dict[Stack, list[Cell]] = {}
    for cell in cells:
        if cell.scenario.expect:
            stack = cell_stack(cell)
            if cell.status == PLANNED:
                runs.setdefault(stack, cell.id)
            else:
                blocked.setdefault(stack, []).append(cell)
    out = []
    for cell in cells:
        if cell.scenario.expect or cell.status == SKIPPED:
            out.append(cell)
            continue
        stack = cell_stack(cell)
        if stack in runs:
            out.append(replace(cell, vetted_by=runs[stack]))
        else:
            out.append(replace(cell, unvetted=unvetted_reason(stack, blocked.get(stack, []))))
    return out


def unvetted_reason(stack: Stack, candidates: list[Cell]) -> str:
    """Why no control can vet a detector stack: none is declared for it, or each candidate is skipped (why)."""
    if not candidates:
        return f"no control runs on its detector stack ({stack.text()}): add a control scenario the environment can run"
    first = candidates[0]
    return f"no control runs on its detector stack ({stack.text()}): {len(candidates)} skipped, e.g. {first.id}: {first.reason}"


def vetting_by_gpu(cells: list[Cell]) -> dict[str, dict[str, Any]]:
    """Per GPU type (plan order): environments with a healthy planned or covered cell, how many of them every such
    cell of can be vetted, the planned controls, and each unvettable environment with its first reason."""
    envs: dict[str, dict[str, str]] = {}
    controls: dict[str, int] = {}
    for cell in cells:
        gpu = cell.env.gpu
        controls.setdefault(gpu, 0)
        if cell.scenario.expect:
            controls[gpu] += cell.status == PLANNED
        elif cell.status != SKIPPED:
            why = envs.setdefault(gpu, {}).setdefault(cell.env.id, "")
            if cell.unvetted and not why:
                envs[gpu][cell.env.id] = f"{cell.scenario.name}: {cell.unvetted}"
    out: dict[str, dict[str, Any]] = {}
    for gpu, count in controls.items():
        found = envs.get(gpu, {})
        bad = {env: why for env, why in found.items() if why}
        out[gpu] = {"environments": len(found), "vettable": len(found) - len(bad), "controls": count, "unvettable": bad}
    return out
