"""Hostile requirements files and locks handed to `envmatrix init`: each ends with exit 2, a message naming the
file (and the line where there is one), no traceback, within the time and memory bounds of bounded.py; nothing is
written."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from bounded import assert_clean_failure, run_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envmatrix.errors import EnvmatrixError
from envmatrix.stack import read_stack
from envmatrix.stack.base import MAX_LOCK_BYTES, MAX_REQUIREMENTS_BYTES

CASES: dict[str, tuple[str, bytes, str]] = {
    "huge requirements": ("requirements.txt", b"torch==2.13.0\n" + b"#" * (MAX_REQUIREMENTS_BYTES + 10), "more than a requirements file may hold (1 MiB)"),
    "huge lock": ("pylock.toml", b'lock-version = "1.0"\n' + b"#" * (MAX_LOCK_BYTES + 10), "more than a"),
    "binary": ("requirements.txt", b"torch==2.13.0\n\xff\xfe\x00\x00", "requirements.txt:2: not UTF-8"),
    "deep toml": ("pylock.toml", b'lock-version = "1.0"\nx = ' + b"[" * 100_000 + b"]" * 100_000 + b"\n", "pylock.toml"),
    "deep inline tables": ("uv.lock", b"version = 1\nx = " + b"{a = " * 50_000 + b"1" + b"}" * 50_000 + b"\n", "uv.lock"),
    "huge integer": ("pylock.toml", b'lock-version = "1.0"\nx = ' + b"9" * 100_000 + b"\n", "pylock.toml"),
    "escape in a name": ("requirements.txt", b"torch==2.13.0\n\x1b[2Jevil==1\n", "requirements.txt:2"),
    "escape in a version": ("pylock.toml", b'lock-version = "1.0"\n[[packages]]\nname = "torch"\nversion = "\\u001b[2J"\n', "pylock.toml:2: torch "),
    "no torch": ("requirements.txt", b"transformers==4.51.3\n", "no exact pin of torch"),
    "torch range": ("requirements.txt", b"torch>=2.5\ntransformers==4.51.3\n", "torch: it names >=2.5"),
    "shell in a version": ("requirements.txt", b"torch==2.13.0;rm -rf ~\n", "requirements.txt:1"),
    "many packages": ("requirements.txt", b"".join(b"p%d==1\n" % i for i in range(20_000)), "more than 10,000 packages"),
    "directory": ("requirements.txt", b"", "is a folder"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_stack_file(tmp_path: Path, case: str) -> None:
    name, content, says = CASES[case]
    path = tmp_path / name
    if case == "directory":
        path.mkdir()
    else:
        path.write_bytes(content)
    ended = run_bounded(["init", "--from", str(path), "--file", str(tmp_path / "matrix.yaml")], cwd=tmp_path)
    assert_clean_failure(ended, 2, says=says)
    assert "\x1b" not in ended.stderr, "terminal escapes from the file never reach the terminal"
    assert not (tmp_path / "matrix.yaml").exists(), "nothing written"


def test_include_loop_is_bounded(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("-r b.txt\ntorch==2.13.0\n")
    (tmp_path / "b.txt").write_text("-r a.txt\n")
    assert_clean_failure(
        run_bounded(["init", "--from", str(tmp_path / "a.txt"), "--file", str(tmp_path / "m.yaml")], cwd=tmp_path), 2, says="included more than"
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400), st.sampled_from(["requirements.txt", "pylock.toml", "uv.lock"]))
def test_any_bytes_read_or_refused_cleanly(tmp_path: Path, data: bytes, name: str) -> None:
    """Whatever the bytes, a reader answers a stack or an EnvmatrixError, never another exception."""
    path = tmp_path / name
    path.write_bytes(data)
    with contextlib.suppress(EnvmatrixError):
        read_stack(path)
