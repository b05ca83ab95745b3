"""Pure: did the probe run on the GPU type its cell names? A job that lands on the wrong GPU (or on
none) must never report green for the GPU it was meant to test.

The probe reads the device it trained on inside the environment (`result.json` → `env`); that, not
the plan, is what a record is checked against — when it is written and again whenever it is read,
since records are merged from other hosts. Part of the record contract, so it lives here.
"""

from __future__ import annotations

from ..facts.catalog import gpu_from_smi_name
from .probe_result import EnvFacts


def seen(facts: EnvFacts | None) -> str | None:
    """The matrix GPU type the probe saw: `cpu`, a catalog name, `unknown:<name>`, or None (not said)."""
    if facts is None:
        return None
    device = facts.device or ""
    if device.startswith("cpu"):
        return "cpu"
    if not facts.gpu_name:
        return None
    return gpu_from_smi_name(facts.gpu_name) or f"unknown:{facts.gpu_name}"


def mismatch(cell_gpu: str, facts: EnvFacts | None) -> str | None:
    """Evidence when the probe saw another GPU type than `cell_gpu`, or could not say which; None when it matches."""
    got = seen(facts)
    if got == cell_gpu:
        return None
    if got is None:
        return f"the record does not say which device the probe ran on; the cell names {cell_gpu}"
    detail = f" ({facts.gpu_name}, compute capability {facts.compute_capability})" if facts and got != "cpu" else ""
    return f"the probe ran on {got.removeprefix('unknown:')}{detail}, not on the {cell_gpu} this cell names"
