"""A published site served on loopback, and a report merged from two sites, opened in a real headless
browser (Debian's chromium driven by playwright, as test_browser.py does)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from records_factory import make_record
from site_servers import serve_folder
from test_browser import ARGS, CHROMIUM

from envmatrix.outputs.report import write_merged
from envmatrix.records.record import cell_stem, write_record
from envmatrix.share.keys import public_key_from_pem, public_pem
from envmatrix.share.merge import gather
from envmatrix.share.publish import publish

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium; .ci/run installs it)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="needs playwright (the test extra)"),
]


def signed_site(tmp_path: Path, name: str, transformers: str) -> tuple[Path, Ed25519PrivateKey]:
    results = tmp_path / name / "results"
    common = {"torch": "2.13.0", "cuda": "none", "gpu": "cpu", "transformers": transformers}
    for rec in (make_record("ok", **common), make_record("zero_grad", scenario="ctl-zero-grad", expect="zero_grad", **common)):
        write_record(results / f"{cell_stem(rec.id)}.json", rec)
    key = Ed25519PrivateKey.generate()
    publish([results], tmp_path / f"site-{name}", key, print)
    return tmp_path / f"site-{name}", key


def test_published_site_and_merged_report_say_provenance_in_a_browser(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    site_a, key_a = signed_site(tmp_path, "a", "4.57.6")
    site_b, _ = signed_site(tmp_path, "b", "5.23.0")
    trusted = [public_key_from_pem(public_pem(key_a.public_key()), "a.pub")]
    with serve_folder(site_a) as url_a, serve_folder(site_b) as url_b, sync_playwright() as pw:
        report = write_merged(gather([url_a, url_b], trusted, print), tmp_path / "merged")["html"]
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url_a + "index.html")
            assert page.locator("td.cell").count() == 2 and page.locator("td.cell[data-provenance='signed']").count() == 2
            page.screenshot(path=str(tmp_path / "site.png"), full_page=True)
            page.locator("td.cell").first.click()
            assert page.locator("#p-provenance").inner_text().startswith("signed by ")

            page.goto(report.as_uri())
            assert page.locator("#trust").is_visible() and "shown apart" in page.locator("#trust").inner_text()
            assert page.locator("td.cell[data-provenance='verified']").count() == 2
            apart = page.locator("#apart-table tbody tr")
            assert apart.count() == 2 and all("signer not trusted" in t and url_b in t for t in apart.all_inner_texts())
            assert "5.23.0" not in page.locator("#matrix").inner_text()  # the untrusted runner's environment is not in the table
            page.screenshot(path=str(tmp_path / "merged.png"), full_page=True)
        finally:
            browser.close()
    assert (tmp_path / "site.png").stat().st_size > 10_000 and (tmp_path / "merged.png").stat().st_size > 10_000
