"""Hostile logs: generated adversarial lines end within a stated bound, raise nothing, and never read as `ok`.

The bound (BOUND_S seconds per case, memory of the chunked scan) is a safety net against a scan that is not
linear (the old backtracking pattern took minutes on 40 bytes of `, 12\\r, 12…`), not a speed measurement:
bench/bench_classify.py measures speed.
"""

from __future__ import annotations

import io
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envmatrix.records.outcomes import OUTCOME_NAMES
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import CHUNK, scan_stream

BOUND_S = 10

PIECES = [
    b", 12",
    b",",
    b" 12",
    b"\r",
    b"\r\n",
    b"\n",
    b"[rank0]:",
    b"[",
    b"]",
    b":",
    b" ",
    b"loss",
    b"grad_norm",
    b": ",
    b"nan",
    b"0.0",
    b"Error",
    b"RuntimeError: ",
    b"<|endoftext|>",
    b"in ",
    b"\x1b[31m",
    b"\x1b[0m",
    b"\xff\xfe",
    b"151644, ",
    b"!",
    b"Expected to mark ",
    b"completion: ",
    b"\t",
    b"0" * 7,
]


@contextmanager
def bounded(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"scan took more than {seconds} s: not linear")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def classify_bytes(data: bytes) -> str:
    with bounded(BOUND_S):
        return classify(RunFacts(scan=scan_stream(io.BytesIO(data)))).outcome


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=400), st.integers(min_value=1, max_value=2000))
def test_generated_adversarial_lines(pieces: list[bytes], repeat: int) -> None:
    line = b"".join(pieces)
    got = classify_bytes(line * repeat)
    assert got in OUTCOME_NAMES
    assert got != "ok" or b"grad_norm" in line  # ok only with a gradient norm in the text


@settings(max_examples=30, deadline=None)
@given(st.binary(min_size=0, max_size=20000))
def test_random_bytes_are_never_ok(data: bytes) -> None:
    assert classify_bytes(data) != "ok"


def test_known_worst_cases_stay_linear() -> None:
    """The shapes that made the old scanner exponential, at a size the old one never finished."""
    cases = [
        b", 12" + b",\r 12" * 200_000,  # repeats of one id with \r between them
        b", 12" + b", [x]: 12" * 200_000 + b", 13",  # bracketed prefixes between repeats, a different id at the end
        (b"loss " * 200_000) + b"loss: 0.1",  # one key repeated with no value
        b"[rank0]:" * 400_000 + b"RuntimeError",  # prefixes without an end
        b"x" * (3 * CHUNK) + b"\r" * CHUNK,  # giant lines
        b"in " * 1_000_000,  # one word, no line end
    ]
    for data in cases:
        assert classify_bytes(data) in OUTCOME_NAMES


def test_a_failure_survives_hostile_noise() -> None:
    noise = b"".join(PIECES) * 50 + b"\n"
    data = noise * 200 + b"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + noise * 200
    assert classify_bytes(data) == "oom"
