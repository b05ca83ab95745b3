"""`envmatrix preflight`: will MY run train here? A user's architecture (config.json and tokenizer, no
weights), shrunk by the probe to a tiny random model of the same class, trained with GRPO under the user's
own GRPO settings: in this interpreter (like doctor), or as a scenario in every environment of a profile.

The model folder is checked here before anything runs (a clear error, exit 2); what only the environment can
decide (does its transformers know the model_type, does the tokenizer load) the probe decides and says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from probes.modelfolder import read_config, remote_code
from probes.untrusted import Refused

from ..errors import BackendError, InputError
from ..host.gpus import HostGpus
from ..records.outcomes import Outcome
from ..records.record import Record, Status
from ..spec.matrix import Scenario, Spec
from .grpoconfig import Mapped

#: The probe's exit statuses that mean "this input cannot run here" (probes/record.py, probes/families.py).
PROBE_BAD_INPUT, PROBE_UNAVAILABLE = 2, 3
_SLUG = re.compile(r"[^a-z0-9_.-]+")


@dataclass(frozen=True)
class UserModel:
    """A model folder as the user gave it: its config.json, and whether they trust its Python files."""

    folder: Path
    config: dict[str, Any]
    trust_remote_code: bool

    @property
    def model_type(self) -> str:
        return str(self.config["model_type"])

    @property
    def remote(self) -> dict[str, str]:
        return remote_code(self.config)


def user_model(folder: Path, *, trust_remote_code: bool) -> UserModel:
    """The folder checked: a readable config.json naming a model_type (InputError, exit 2, otherwise)."""
    try:
        config = read_config(folder)
    except Refused as exc:
        raise InputError(f"--model-config {exc}") from None
    return UserModel(folder.resolve(), config, trust_remote_code)


def scenario(model: UserModel, mapped: Mapped, *, trainer: str, first_release: str | None = None) -> Scenario:
    """The preflight as a scenario: the probe's defaults, the user's GRPO settings over them, their folder shrunk."""
    fields = {"trainer": trainer, **mapped.fields}
    known = f"; transformers knows {model.model_type} from {first_release} on (read from the released wheels)" if first_release else ""
    return Scenario(
        name="preflight-" + (_SLUG.sub("-", model.model_type.lower()).strip("-") or "model")[:50],
        description=f"preflight of {model.folder} ({model.model_type}){known}",
        model=str(model.folder),
        shrink=True,
        trust_remote_code=model.trust_remote_code,
        **fields,
    )


def with_scenario(spec: Spec, profile: str, added: Scenario) -> Spec:
    """The matrix with the preflight as the profile's only scenario (its environments and rules unchanged)."""
    prof = replace(spec.profiles[profile], scenarios=(added.name,), select=(), skip=())
    return replace(spec, profiles={**spec.profiles, profile: prof}, scenarios={**spec.scenarios, added.name: added})


def probe_refusal(record: Record) -> str | None:
    """The probe's own one-line refusal (bad input, or a model_type this transformers lacks), None when it ran."""
    if record.exit_code not in (PROBE_BAD_INPUT, PROBE_UNAVAILABLE):
        return None
    error = record.result.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return str(message) if message else None


def first_release_line(model_type: str, cache: Path) -> tuple[str | None, str]:
    """The first transformers release that knows the type (read from the released wheels) and a line saying it,
    or None and why it could not be found (no index reachable: the matrix's own split still shows it)."""
    import subprocess

    from ..facts.archsupport import first_release

    try:
        found = first_release(model_type, cache)
    except (InputError, subprocess.SubprocessError, OSError, StopIteration, KeyError) as exc:
        return None, f"the first transformers release that knows {model_type} could not be read from the wheels: {str(exc)[:200] or type(exc).__name__}"
    if found.first is None:
        return None, f"no transformers release on the index knows {model_type} (the newest, {found.before}, read from its wheel)"
    before = f"; {found.before} does not" if found.before else ""
    return found.first, f"transformers knows {model_type} from {found.first} on{before} (read from the released wheels: {found.read} read)"


def exit_code(record: Record) -> int:
    """0 when the run trained (ok), 1 when it did not, 2 when the probe refused the input in this interpreter,
    3 when this interpreter cannot run it at all (an engine or package the scenario needs is missing)."""
    if record.status == Status.SKIPPED:
        return BackendError.exit_code
    if probe_refusal(record) is not None:
        return 2
    return 0 if record.klass == Outcome.OK else 1


def shrunk_facts(record: Record) -> dict[str, Any]:
    """What the probe built (result.json's model.shrunk), empty when it did not get that far."""
    model = record.result.get("model")
    shrunk = model.get("shrunk") if isinstance(model, dict) else None
    return {**shrunk, "class": model.get("class"), "tokenizer": model.get("tokenizer")} if isinstance(shrunk, dict) and isinstance(model, dict) else {}


def summary(record: Record, model: UserModel, mapped: Mapped, gpus: HostGpus) -> dict[str, Any]:
    """The JSON answer: verdict (classify's keys), what was built, what of the GRPO settings was modelled."""
    refused = probe_refusal(record)
    return {
        "model_config": str(model.folder),
        "model_type": model.model_type,
        "scenario": record.cell.scenario,
        "environment": record.env,
        "gpu": gpus.matrix_name or "cpu",
        **record.outcome.as_dict(),
        "refused": refused,
        "exit_code": exit_code(record),
        "seconds": record.timings.probe_s,
        "model": shrunk_facts(record),
        "grpo_config": {"fields": mapped.fields, "not_modelled": mapped.unmodelled, "notes": list(mapped.notes)},
        "log": record.log.path,
    }
