"""Pure: did the probe run on the GPU type its cell names? A job that lands on the wrong GPU (or on
none) must never report green for the GPU it was meant to test.

The probe reads the device it trained on inside the environment (`result.json` → `env`); that, not
the plan, is what a record is checked against — when it is written and again whenever it is read,
since records are merged from other hosts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..facts.catalog import gpu_from_smi_name


def seen(facts: Mapping[str, Any] | None) -> str | None:
    """The matrix GPU type the probe saw: `cpu`, a catalog name, `unknown:<name>`, or None (not said)."""
    if not facts:
        return None
    device = str(facts.get("device") or "")
    if device.startswith("cpu"):
        return "cpu"
    name = facts.get("gpu_name")
    if not isinstance(name, str) or not name:
        return None
    return gpu_from_smi_name(name) or f"unknown:{name}"


def mismatch(cell_gpu: str, facts: Mapping[str, Any] | None) -> str | None:
    """Evidence when the probe saw another GPU type than `cell_gpu`, or could not say which; None when it matches."""
    got = seen(facts)
    if got == cell_gpu:
        return None
    if got is None:
        return f"the record does not say which device the probe ran on; the cell names {cell_gpu}"
    detail = f" ({facts.get('gpu_name')}, compute capability {facts.get('compute_capability')})" if facts and got != "cpu" else ""
    return f"the probe ran on {got.removeprefix('unknown:')}{detail}, not on the {cell_gpu} this cell names"
