"""The units of a matrix: an environment (one value per axis) and a cell (a scenario in an environment),
with stable, readable ids."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..spec.matrix import AXES, Scenario
from ..spec.patterns import compile_selection

PLANNED = "planned"
SKIPPED = "skipped"
#: Runs nowhere: its scenario depends on no axis where its environment differs from one whose cell runs
#: (plan/cover.py); it is shown, recorded and reported with that cell's outcome.
COVERED = "covered"


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
    #: The kinds of the skip reasons (plan/eligibility.py), in the order found.
    kinds: tuple[str, ...] = ()
    #: A covered cell's cell that runs (plan/cover.py).
    covered_by: str = ""
    #: A healthy cell's control on the same detector stack (plan/vetrule.py), or why none can vet it.
    vetted_by: str = ""
    unvetted: str = ""

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
            "kinds": list(self.kinds),
            "covered_by": self.covered_by or None,
            "vetted_by": self.vetted_by or None,
            "unvetted": self.unvetted or None,
        }


def matches(cell_id: str, patterns: Iterable[str]) -> bool:
    """Whether a cell id matches any fnmatch pattern (braces expand: `*/{fp32,bf16}-sdpa`)."""
    compiled = compile_selection(patterns)
    return compiled is not None and compiled.match(cell_id) is not None
