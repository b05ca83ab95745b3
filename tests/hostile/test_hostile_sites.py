"""Hostile published sites against `envmatrix report`: each stops within its bounds with a clear message and
exit status 2, and the good site read beside it loses nothing.

The servers are real, on loopback, in this process (tests/site_servers.py). The command runs as a child
under a memory and time limit (bounded.py). The slow cases (a drip, a stall) run in-process under small
limits: with the command's own limits they would take a minute each, by design.

Bounds: every case here ends in a few seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bounded import assert_clean_failure, run_bounded
from records_factory import make_record
from site_servers import DRIP_S, serve_folder, serve_hostile

from envmatrix.records.record import cell_stem, write_record
from envmatrix.share.fetch import HttpSite
from envmatrix.share.limits import MAX_INDEX_BYTES, MAX_RECORD_BYTES, MAX_RECORDS_PER_SITE, MAX_REDIRECTS, Limits
from envmatrix.share.merge import gather
from envmatrix.share.publish import publish
from envmatrix.share.site import read_site


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A well-behaved unsigned site of two records, served on loopback."""
    tmp = tmp_path_factory.mktemp("good")
    for rec in (make_record("ok", gpu="cpu", cuda="none"), make_record("nan_loss", scenario="bf16", gpu="cpu", cuda="none")):
        write_record(tmp / "results" / f"{cell_stem(rec.id)}.json", rec)
    publish([tmp / "results"], tmp / "site", None, print)
    with serve_folder(tmp / "site") as url:
        yield url


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serve_hostile() as url:
        yield url


@pytest.mark.parametrize(
    ("site", "says"),
    [
        ("huge/", f"larger than a site index can be ({MAX_INDEX_BYTES})"),
        ("many/", f"lists 25000 records, more than a site may ({MAX_RECORDS_PER_SITE})"),
        ("endless/", f"more than {MAX_INDEX_BYTES} bytes (8 MiB), larger than a site index can be (an endless response?)"),
        ("records/", "garbage.json: not JSON"),
        ("records/", f"endless.json: more than {MAX_RECORD_BYTES} bytes"),
        ("loop/", "a redirect loop"),
        ("hops/", f"more than {MAX_REDIRECTS} redirects"),
        ("nowhere/", "HTTP 404"),
    ],
)
def test_a_hostile_site_stops_within_its_bounds_and_the_good_one_is_kept(good: str, hostile: str, site: str, says: str, tmp_path: Path) -> None:
    ended = run_bounded(["report", "--results", good, "--results", hostile + site, "--out", str(tmp_path)])
    assert_clean_failure(ended, 2, says=says)
    assert "problem(s) reading the sites" in ended.stderr and ended.seconds < 20
    rows = json.loads((tmp_path / "results.json").read_text())
    assert sorted(r["class"] for r in rows) == ["nan_loss", "ok"] and {r["provenance"]["source"] for r in rows} == {good}


def test_a_site_that_cannot_be_reached_is_named(good: str, tmp_path: Path) -> None:
    with serve_folder(tmp_path) as gone:
        pass  # the port is closed again: nothing listens there now
    ended = run_bounded(["report", "--results", gone, "--results", good, "--out", str(tmp_path / "out")])
    assert_clean_failure(ended, 2, says="cannot be reached")
    assert len(json.loads((tmp_path / "out" / "results.json").read_text())) == 2


def test_a_slow_drip_stops_at_the_file_deadline(hostile: str) -> None:
    limits = Limits(file_s=1.0, stall_s=5.0)
    start = time.monotonic()
    rows, problems = read_site(HttpSite(hostile + "drip/", limits), [], limits, lambda m: None)
    took = time.monotonic() - start
    assert rows == [] and len(problems) == 1 and "still arriving after 1 s (a slow drip?)" in problems[0]
    assert 1.0 <= took < 1.0 + 3 * DRIP_S + 1.0, took


def test_a_stalled_response_stops_at_the_stall_timeout(hostile: str) -> None:
    limits = Limits(stall_s=0.5)
    start = time.monotonic()
    rows, problems = read_site(HttpSite(hostile + "stall/", limits), [], limits, lambda m: None)
    assert rows == [] and "no byte for 0.5 s" in problems[0]
    assert time.monotonic() - start < 3


def test_the_site_budget_keeps_what_was_read_before_it_ran_out(good: str) -> None:
    index = len(HttpSite(good, Limits()).get("index.json", MAX_INDEX_BYTES, "an index"))
    limits = Limits(site_bytes=index + 1)  # the index fits; the first record does not
    warnings: list[str] = []
    merged = gather([good], [], warnings.append, limits)
    assert merged.rows == () and len(merged.problems) == 1 and "more than" in merged.problems[0] and "the rest of this site is left out" in merged.problems[0]
