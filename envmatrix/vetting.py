"""Pure: which environments are vetted on a GPU type, and the newest of them.

An environment is vetted on a GPU when, there, every scenario without an expectation that ran is ok,
every control that ran reproduced its failure, and at least one healthy scenario ran.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from packaging.version import Version

from .spec import AXES


def vetted_environments(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per vetted environment id (environment × GPU), in id order."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        if rec.get("status") != "skipped":
            groups[rec["cell"]["env"]].append(rec)
    vetted = []
    for env_id, recs in sorted(groups.items()):
        healthy = [r for r in recs if not r["cell"].get("expect")]
        controls = [r for r in recs if r["cell"].get("expect")]
        if healthy and all(r["outcome"]["class"] == "ok" for r in healthy) and all(r.get("control") == "reproduced" for r in controls):
            cell = recs[0]["cell"]
            vetted.append({"env": env_id, "build": cell["build"], **{k: cell[k] for k in AXES}, "healthy": len(healthy), "controls": len(controls)})
    return vetted


def _key(entry: dict[str, Any]) -> tuple[Version, Version, Version, Version]:
    fa = entry["flash_attn"]
    cuda = entry["cuda"]
    return (Version(entry["torch"]), Version(entry["transformers"]), Version("0" if fa == "none" else fa), Version("0" if cuda == "none" else cuda))


def best(vetted: list[dict[str, Any]], gpu: str) -> dict[str, Any] | None:
    """The newest vetted environment for a GPU type (torch, then transformers, flash-attn, CUDA)."""
    mine = [v for v in vetted if v["gpu"] == gpu]
    return max(mine, key=_key) if mine else None
