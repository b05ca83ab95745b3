"""A real headless browser (Debian's chromium driven by playwright; no browser download) opens the report."""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from records_factory import make_record

from envmatrix.outputs.report import write_report
from envmatrix.records.record import Record, cell_stem, write_record

if TYPE_CHECKING:
    from playwright.sync_api import Page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="needs playwright (the test extra)"),
]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]


@contextmanager
def report_page(records: list[Record], tmp_path: Path, width: int) -> Iterator[Page]:
    """Write the records, render the report from them, and open it in headless chromium."""
    from playwright.sync_api import sync_playwright

    results = tmp_path / "results"
    for rec in records:
        write_record(results / f"{cell_stem(rec.id)}.json", rec)
    html = write_report([results], tmp_path)["html"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": width, "height": 800})
        page.goto(html.as_uri())
        try:
            yield page
        finally:
            browser.close()


def test_report_renders_filters_and_escapes(tmp_path: Path) -> None:
    records = [
        make_record("ok"),
        make_record("sigfpe", scenario="bf16", evidence="line 9: Caught signal 8 (Floating point exception)"),
        make_record("ok", transformers="4.57.6"),
        make_record(
            "error", scenario="bf16", transformers="4.57.6", evidence="<script>window.pwned = 1</script>", log_tail="<img src=x onerror='window.pwned=2'>"
        ),
        make_record("zero_grad", scenario="ctl-zero-grad", expect="zero_grad", gpu="H20", torch="2.8.0", cuda="12.8"),
    ]
    with report_page(records, tmp_path, 1400) as page:
        assert page.locator("#matrix tbody tr").count() == 3
        assert page.locator("td.cell").count() == 5
        page.select_option("#f-outcome", "sigfpe")
        visible = page.locator("#matrix tbody tr:not(.hidden)")
        assert visible.count() == 1 and "2.6.0" in visible.inner_text()
        page.select_option("#f-outcome", "")
        page.select_option("#f-gpu", "H20")
        assert page.locator("th.gpu:not(.hidden)").all_inner_texts() == ["H20"]
        page.select_option("#f-gpu", "")
        page.locator("td.cell[data-outcome='error']").click()
        assert page.locator("#panel").is_visible()
        assert page.locator("#p-evidence").inner_text() == "<script>window.pwned = 1</script>"
        assert "onerror" in page.locator("#p-log").inner_text()
        assert page.evaluate("window.pwned") is None
        page.screenshot(path=str(tmp_path / "matrix.png"), full_page=True)
    assert (tmp_path / "matrix.png").stat().st_size > 10_000


def test_first_screen_shows_findings_and_a_failed_control_loud(tmp_path: Path) -> None:
    """At 1280x800 the findings (with the explaining axis) are on the first screen; reproduced controls
    are drawn quietly and a control that did not reproduce is loud."""
    common = {"torch": "2.13.0", "cuda": "none", "gpu": "cpu"}
    records = []
    for tf in ("4.51.3", "4.57.6", "5.23.0"):
        records.append(make_record("ok", transformers=tf, **common))
        records.append(make_record("grad_lost" if tf != "5.23.0" else "ok", scenario="frozen-emb-reentrant", transformers=tf, **common))
        ctl = "ok" if tf == "5.23.0" else "zero_grad"  # the newest release's control fails to reproduce
        records.append(make_record(ctl, scenario="ctl-zero-grad", expect="zero_grad", transformers=tf, **common))
    with report_page(records, tmp_path, 1280) as page:
        finding = page.locator("#findings li.finding").first
        assert "transformers" in finding.inner_text() and "grad_lost" in finding.inner_text()
        box = finding.bounding_box()
        assert box is not None and box["y"] + box["height"] <= 800  # on the first screen
        assert page.locator("#failed-controls").is_visible()
        quiet = page.locator("td.cell.quiet").first.evaluate("e => getComputedStyle(e).backgroundColor")
        loud = page.locator("td.cell.failedcontrol").evaluate("e => getComputedStyle(e).outlineStyle + ' ' + getComputedStyle(e).backgroundColor")
        assert quiet == "rgb(246, 248, 250)"  # reproduced controls: pale, muted
        assert loud.startswith("solid") and "246, 248, 250" not in loud  # the failed control: framed, in its class colour
