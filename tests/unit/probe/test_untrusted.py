"""probes/untrusted.py: the one owner of bounds on users' files, the number wording and terminal-safe text."""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import pytest

from probes import untrusted
from probes.untrusted import Bounded, Kind, Refused, number_problem, open_stream, parse_json, printable, read_bytes

SMALL = Kind("a small file", 16, max_depth=3, max_digits=5)


def test_read_bytes_refuses_what_is_not_a_regular_file_within_the_bound(tmp_path: Path) -> None:
    ok = tmp_path / "ok"
    ok.write_bytes(b"x" * 16)
    assert read_bytes(ok, SMALL) == b"x" * 16
    big = tmp_path / "big"
    big.write_bytes(b"x" * 17)
    with pytest.raises(Refused, match=r"big: 17 bytes, more than a small file may hold \(16 bytes\)"):
        read_bytes(big, SMALL)
    with pytest.raises(Refused, match=r"not a regular file \(a folder\)"):
        read_bytes(tmp_path, SMALL)
    with pytest.raises(Refused, match="cannot be read"):
        read_bytes(tmp_path / "missing", SMALL)


def test_parse_json_bounds_depth_and_digits() -> None:
    assert parse_json("[[[1]]]", "f", SMALL) == [[[1]]]
    with pytest.raises(Refused, match="f: nested more than 3 levels deep, deeper than a small file ever is"):
        parse_json("[[[[1]]]]", "f", SMALL)
    with pytest.raises(Refused, match="nested more than 3 levels"):
        parse_json("[" * 100_000 + "]" * 100_000, "f", SMALL)  # past Python's own recursion limit: still one line
    with pytest.raises(Refused, match="a number of 6 digits; a small file holds none longer than 5"):
        parse_json("[-123456]", "f", SMALL)
    assert parse_json("[-12345]", "f", SMALL) == [-12345]
    with pytest.raises(Refused, match=r"not valid JSON \(Expecting value: line 1 column 2\)"):
        parse_json("[", "f", SMALL)
    assert math.isnan(parse_json("[NaN]", "f", SMALL)[0])  # left to the fields that take numbers


def test_depth_counts_without_recursion() -> None:
    deep: list[object] = []
    for _ in range(50_000):
        deep = [deep]
    assert untrusted.depth(deep) == 50_001
    assert untrusted.depth({"a": [1, {"b": 2}]}) == 3 and untrusted.depth(7) == 0


def test_streams_that_are_not_files_end_at_the_bound(tmp_path: Path) -> None:
    stream, note = open_stream("/dev/zero", SMALL)
    with stream:
        assert stream.read(10) == b"\0" * 10 and stream.read() == b"\0" * 6 and stream.read() == b""
    assert stream.cut and note and "a device, not a regular file: read up to 16 bytes" in note
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(Refused, match="a folder"):
        open_stream(str(tmp_path), SMALL)
    log = tmp_path / "log"
    log.write_bytes(b"x" * 17)
    with pytest.raises(Refused, match="17 bytes, more than a small file may hold"):
        open_stream(str(log), SMALL)
    whole = Bounded(io.BytesIO(b"abc"), 16)
    assert whole.read() == b"abc" and whole.read() == b"" and not whole.cut


def test_number_problems_use_the_matrix_files_words() -> None:
    assert number_problem(4, int, 1, 8) == (4, None)
    assert number_problem(4.5, int, 1, 8) == (None, "must be an integer, got 4.5")
    assert number_problem("4", int, 1, 8) == (None, "must be an integer, got '4'")
    assert number_problem(None, float, 0, 1) == (None, "must be a number, got nothing")
    assert number_problem(9, int, 1, 8) == (None, "9 is out of range [1, 8]")
    assert number_problem("0.5", float, 0, 1, from_text=True) == (0.5, None)
    assert number_problem("0.5", float, 0, 1) == (None, "must be a number, got '0.5'")
    assert number_problem(math.nan, float, 0, 1)[1] == "nan is out of range [0, 1]"
    long = number_problem("x" * 10_000, int, 1, 8)[1]
    assert long is not None and len(long) < 100 and "10,002 characters" in long


def test_printable_escapes_what_drives_a_terminal() -> None:
    assert printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    assert printable("a\x1b]0;pwned\x07b\u202ec\r") == "a\\x1b]0;pwned\\x07b\\u202ec\\r"
    assert printable("two\nlines", keep_newlines=True) == "two\nlines" and printable("two\nlines") == "two\\nlines"


def test_every_kind_has_sane_bounds() -> None:
    kinds = [v for v in vars(untrusted).values() if isinstance(v, Kind)]
    assert len(kinds) >= 11
    for kind in kinds:
        assert kind.max_bytes >= 16 * 1024 and 8 <= kind.max_depth <= 64 and 30 <= kind.max_digits < 4300, kind


def test_the_documented_bounds_are_the_codes() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "untrusted-input.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in doc.splitlines() if line.startswith("| a")}
    for kind in (v for v in vars(untrusted).values() if isinstance(v, Kind)):
        row = next(cells for name, cells in rows.items() if name.startswith(kind.what))
        size, nesting, digits = row
        assert size.startswith(untrusted.size_text(kind.max_bytes)), kind
        assert nesting in ("", str(kind.max_depth)) and digits in ("", str(kind.max_digits)), kind
    assert f"{untrusted.MAX_TOKENS:,} tokens" in doc and f"{untrusted.MAX_EMBEDDING_ROWS:,} rows" in doc
    assert f"{untrusted.MAX_SHRUNK_PARAMETERS // 1_000_000} M parameters" in doc and f"{untrusted.MAX_LAYER_EXPERTS:,}" in doc
