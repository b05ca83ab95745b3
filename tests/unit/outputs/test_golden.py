"""The golden file: every cell's expected outcome, a run compared with it cell by cell (status, class, control,
covered_by), never by timings or evidence text."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from records_factory import make_record

from envmatrix.errors import InputError
from envmatrix.outputs import golden
from envmatrix.records.outcomes import Outcome, decided


def test_a_run_that_matches_has_no_differences_and_one_that_moves_names_the_cell(tmp_path: Path) -> None:
    ok = make_record("ok")
    path = tmp_path / "golden.json"
    golden.write(path, [ok], "cpu")
    assert golden.differences([replace(ok, timings=replace(ok.timings, probe_s=99.0))], golden.read(path)) == []
    moved = replace(ok, outcome=decided(Outcome.NAN_LOSS, "loss nan", "test"))
    (line,) = golden.differences([moved], golden.read(path))
    assert line.startswith(ok.id) and "class 'ok' → 'nan_loss'" in line
    assert golden.differences([], golden.read(path)) == [f"{ok.id}: in the golden file, not in this run"]


def test_a_file_that_is_not_a_golden_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no golden file"):
        golden.read(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text('{"cells": [1, 2]}')
    with pytest.raises(InputError, match="not a golden file"):
        golden.read(tmp_path / "x.json")
