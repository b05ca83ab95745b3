"""The readers' hostile cases of issue 42 (tests/hostile/reader_cases.py), each through the real command in a
bounded child (bounded.py: 30 s, 1 GiB of address space, 256 MiB resident): the exit status and message the case
names, no traceback, no escape sequence and no secret from the environment or a file in the output, and for the
refusals nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from bounded import assert_clean_failure, run_bounded
from reader_cases import CASES, SECRET


@pytest.mark.parametrize("name", sorted(CASES))
def test_reader_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    case = CASES[name]
    monkeypatch.setenv("API_TOKEN", SECRET)
    args = case.build(tmp_path)
    ended = run_bounded(args, cwd=tmp_path)
    assert_clean_failure(ended, case.status, says=case.says)
    said = ended.stdout + ended.stderr
    assert SECRET not in said, "no secret reaches a message"
    assert not any(c in said for c in ("\x1b", "\x07", "\x00")), "no control byte reaches the terminal"
    if case.status:
        assert not (tmp_path / "matrix.yaml").exists() or name.startswith("matrix.yaml"), "nothing written"
        assert len(ended.stderr.strip().splitlines()) == 1, "one line"
