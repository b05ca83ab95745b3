"""Render a results folder's report and screenshot its first screen (1280x800) with Debian's chromium.

PYTHONPATH=$PWD python docs/screenshot.py reports/results docs/matrix-findings.png
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import sync_playwright

from envmatrix.outputs.report import write_report


def main(results: str, png: str) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs Debian's chromium (apt-get install chromium)")
    html = write_report([Path(results)], Path(tempfile.mkdtemp(prefix="envmatrix-shot-")))["html"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(html.as_uri())
        page.screenshot(path=png)
        browser.close()
    print(f"{png}: first screen of {html}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
