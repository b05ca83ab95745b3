"""watch's upgrade order follows the boundaries when no single other upgrade is enough (issue 41, item 4): transformers
5 breaks peft (an import peft makes), the newest peft then shows trl importing a module transformers no longer brings
along; the order moves peft, then trl, and says the fewest that train. What each cell shows comes from a log with that
traceback (the verdict reads it); the runner is a table, not venvs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from records_factory import make_record
from rich.console import Console

from envmatrix.answers import watch_run
from envmatrix.answers.watch_run import WatchRequest, run_watch
from envmatrix.facts.releases import Listing, Release
from envmatrix.plan.cells import Cell
from envmatrix.records.record import cell_info, cell_stem, inputs_hash, write_record
from envmatrix.spec.matrix import load
from envmatrix.verdict.remedies import culprit

SITE = "/v/lib/python3.11/site-packages"
PEFT_IMPORT = f"""Traceback (most recent call last):
  File "{SITE}/trl/trainer/grpo_trainer.py", line 20, in <module>
    from peft import PeftConfig
  File "{SITE}/peft/utils/other.py", line 30, in <module>
    from transformers import HybridCache
ImportError: cannot import name 'HybridCache' from 'transformers' ({SITE}/transformers/__init__.py)
"""
TRL_REQUESTS = f"""Traceback (most recent call last):
  File "/work/probes/grpo_smoke.py", line 12, in <module>
    import trl
  File "{SITE}/trl/extras/vllm_client.py", line 22, in <module>
    import requests
ModuleNotFoundError: No module named 'requests'
"""

MATRIX = """\
version: 1
profiles:
  stack:
    cuda: [none]
    torch: [2.13.0]
    transformers: [4.56.2]
    flash_attn: [none]
    gpu: [cpu]
    python: ["3.11"]
    packages: {trl: [0.23.1], peft: [0.17.1], accelerate: [1.10.1]}
    scenarios: [trl-grpo]
scenarios:
  trl-grpo: {trainer: trl}
"""
INDEX = {
    "transformers": ["4.56.2", "4.57.6", "5.0.0", "5.24.0"],
    "trl": ["0.23.1", "1.16.0"],
    "peft": ["0.17.1", "0.21.2"],
    "accelerate": ["1.10.1", "1.15.0"],
    "torch": [],
}


def outcome(cell: Cell) -> tuple[str, str]:
    """The class and the log a cell shows: transformers 5 with peft 0.17 → peft's import; with peft 0.21 and trl 0.x →
    trl's `requests`; else it trains."""
    major = int(cell.env.transformers.split(".")[0])
    if major >= 5 and cell.env.package("peft").startswith("0.17"):
        return "api_mismatch", PEFT_IMPORT
    if major >= 5 and cell.env.package("trl").startswith("0."):
        return "missing_module", TRL_REQUESTS
    return "ok", "step 1 grad_norm 0.5\n"


class TableRunner:
    def __init__(self, results: Path) -> None:
        self.results, self.probe_source, self.runs = results, b"probe", []  # type: ignore[var-annotated]
        self.backend = type("B", (), {"name": "venv"})()

    def record_path(self, cell_id: str) -> Path:
        return self.results / f"{cell_stem(cell_id)}.json"

    def run(self, cells: list[Cell]) -> Any:
        records = []
        for cell in cells:
            self.runs.append(cell.id)
            klass, log = outcome(cell)
            base = make_record(klass, scenario=cell.scenario.name, gpu="cpu", cuda="none", log_tail=log)
            record = dataclasses.replace(base, cell=cell_info(cell), inputs=inputs_hash(cell, self.probe_source, "venv"))
            write_record(self.record_path(cell.id), record)
            records.append(record)
        return type("R", (), {"records": records, "ran": len(records), "cached": 0})()


def test_the_culprit_is_the_caller_of_a_mismatch_or_the_importer_of_a_missing_module() -> None:
    assert culprit(make_record("api_mismatch", log_tail=PEFT_IMPORT)) == "peft"
    assert culprit(make_record("missing_module", log_tail=TRL_REQUESTS)) == "trl"
    assert culprit(make_record("error", log_tail="RuntimeError: boom\n")) == ""


def test_the_order_follows_the_boundaries_to_the_fewest_moves_that_train(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX)
    runner = TableRunner(tmp_path / "reports" / "results")
    runner.results.mkdir(parents=True)

    def listing(name: str, settings: Any = None, *, local: str | None = None, extra: Any = ()) -> Listing:
        found = Listing(name, asked=["https://index.example/simple"])
        for v in INDEX[name]:
            found.releases[v] = Release(v, python_tags={"py3"})
        return found

    monkeypatch.setattr(watch_run, "list_releases", listing)
    monkeypatch.setattr(WatchRequest, "runner", lambda self, profile, console: runner)
    request = WatchRequest(profile="stack", gpu="cpu", backend="venv", reports=tmp_path / "reports", venvs=tmp_path / "venvs", base=tmp_path)
    w = run_watch(load(path), request, Console(quiet=True))
    order = next(o for o in w.orders if o.axis == "transformers")
    moved = [m for m, _ in order.tried]
    assert moved[0] == {"transformers": "5.24.0", "peft": "0.21.2"}, "the caller the verdict names is tried first"
    assert {"transformers": "5.24.0", "peft": "0.21.2", "trl": "1.16.0"} in moved, "then what the new failure names"
    assert order.works and "move transformers to 5.24.0 together with peft 0.21.2" in order.text, order.text
    assert "trl to 1.16.0" in order.text and "No single other upgrade" not in order.text, order.text
