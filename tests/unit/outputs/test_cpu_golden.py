"""The golden file of the shipped cpu profile and the claims made from it: every cell of the plan is in it with
the status the plan gives it (run, covered or skipped), and the README's figures are its figures."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from envmatrix.plan.cells import COVERED, PLANNED, SKIPPED
from envmatrix.plan.expand import expand
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "data" / "golden" / "cpu-outcomes.json"


def golden_cells() -> dict[str, dict[str, object]]:
    data = json.loads(GOLDEN.read_text())
    assert data["profile"] == "cpu"
    return data["cells"]  # type: ignore[no-any-return]


def test_every_cell_of_the_plan_is_in_the_golden_file_with_its_status() -> None:
    want = {PLANNED: {"done"}, COVERED: {"covered"}, SKIPPED: {"skipped"}}
    cells = golden_cells()
    plan = expand(load(ROOT / "matrix.yaml"), "cpu")
    assert {c.id for c in plan} == set(cells)
    for c in plan:
        assert cells[c.id]["status"] in want[c.status], c.id
        if c.status == COVERED:
            assert cells[c.id]["covered_by"] == c.covered_by


def test_the_readme_states_the_golden_files_figures() -> None:
    cells = golden_cells()
    status = Counter(str(v["status"]) for v in cells.values())
    ran = [v for v in cells.values() if v["status"] == "done"]
    reproduced = sum(v["control"] == "reproduced" for v in ran)
    controls = sum(v["control"] is not None for v in ran)
    text = " ".join((ROOT / "README.md").read_text().split())
    m = re.search(r"the cpu profile runs (\d+) cells \((\d+) more covered by them\), (\d+) of its (\d+) controls reproducing", text)
    assert m, "README: the sentence with the cpu profile's golden figures is gone"
    assert tuple(map(int, m.groups())) == (status["done"], status["covered"], reproduced, controls)
