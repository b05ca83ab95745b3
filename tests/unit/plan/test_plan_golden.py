"""The shipped gpu plan, pinned: cells, environments, skip reasons by kind. A change to the catalog,
the eligibility or matrix.yaml that moves the plan shows here as a diff to read, and docs/matrix-yaml.md's
figures are checked against the same plan.

Regenerate after an intended change: ENVMATRIX_UPDATE_GOLDEN=1 pytest tests/unit/plan/test_plan_golden.py
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

from envmatrix.plan.builds import builds
from envmatrix.plan.cells import COVERED, PLANNED, SKIPPED
from envmatrix.plan.expand import expand
from envmatrix.plan.vetrule import vetting_by_gpu
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "data" / "golden" / "gpu-plan.json"


def gpu_plan() -> dict[str, object]:
    cells = expand(load(ROOT / "matrix.yaml"), "gpu")
    return {
        "cells": len(cells),
        "planned": sum(c.status == PLANNED for c in cells),
        "skipped": sum(c.status == SKIPPED for c in cells),
        "covered": sum(c.status == COVERED for c in cells),
        "planned_by_gpu": dict(sorted(Counter(c.env.gpu for c in cells if c.status == PLANNED).items())),
        "environments": [b.build_id for b in builds(cells)],
        "skipped_by_kind": dict(sorted(Counter(k for c in cells for k in c.kinds).items())),
        "reasons": dict(sorted(Counter(c.reason for c in cells if c.status == SKIPPED).items())),
        "vetting": {gpu: [row["environments"], row["vettable"], row["controls"]] for gpu, row in vetting_by_gpu(cells).items()},
        "vetted_by": dict(sorted(Counter(c.vetted_by.split("/")[-1] for c in cells if c.vetted_by).items())),
    }


def test_the_shipped_gpu_plan_is_pinned() -> None:
    got = gpu_plan()
    if os.environ.get("ENVMATRIX_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n")
    want = json.loads(GOLDEN.read_text())
    assert got == want, f"the gpu plan changed: read the diff, then regenerate {GOLDEN.name} (see this module's docstring)"


def test_every_skipped_cell_has_a_kind_and_every_planned_one_none() -> None:
    cells = expand(load(ROOT / "matrix.yaml"), "gpu")
    assert all(c.kinds for c in cells if c.status == SKIPPED)
    assert not any(c.kinds or c.reason for c in cells if c.status == PLANNED)


def test_the_docs_state_the_plan() -> None:
    plan = json.loads(GOLDEN.read_text())
    text = " ".join((ROOT / "docs" / "matrix-yaml.md").read_text().split())
    m = re.search(r"The shipped gpu profile plans ([\d,]+) cells over (\d+) environments", text)
    assert m, "docs/matrix-yaml.md: the sentence giving the gpu plan's size is gone"
    assert (int(m.group(1).replace(",", "")), int(m.group(2))) == (plan["planned"], len(plan["environments"]))
    m = re.search(r"\((\d+) cells there, (\d+) on H20 and (\d+) on each other GPU", text)
    assert m, "docs/matrix-yaml.md: the per-GPU figures are gone"
    by_gpu = plan["planned_by_gpu"]
    assert int(m.group(1)) == by_gpu["A100"] and int(m.group(2)) == by_gpu["H20"]
    assert {by_gpu[g] for g in by_gpu if g not in ("A100", "H20")} == {int(m.group(3))}
    m = re.search(r"The other ([\d,]+) cells stay in the plan as `skipped`", text)
    assert m and int(m.group(1).replace(",", "")) == plan["skipped"]


def test_the_gpu_runners_page_states_the_vetting() -> None:
    plan = json.loads(GOLDEN.read_text())
    text = " ".join((ROOT / "docs" / "gpu-runners.md").read_text().split())
    for gpu in ("A100", "H20"):
        n, vettable, _ = plan["vetting"][gpu]
        assert n == vettable and f"{gpu} {n} of {n}" in text, f"docs/gpu-runners.md: {gpu}'s vetting figures"
    assert f"The plan is {plan['planned']} cells over {len(plan['environments'])} images" in text
