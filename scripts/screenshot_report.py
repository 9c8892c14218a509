"""Regenerate the README's picture of the report: the top of index.html in headless Chromium.

    make report OUT=/tmp/report && .venv/bin/python scripts/screenshot_report.py /tmp/report docs/report.png

Debian's chromium through playwright, as the browser tests use it (never a downloaded browser).
"""

from __future__ import annotations

import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from workbench.present.report import NO_CHROMIUM, find_chromium

VIEWPORT = {"width": 1400, "height": 900}  # the first screen: the findings of the release under review


def main(report_dir: str, png: str) -> None:
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit(NO_CHROMIUM)
    index = Path(report_dir).resolve() / "index.html"
    if not index.is_file():
        raise SystemExit(f"{index} does not exist: run `make report OUT={report_dir}` first")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(index.as_uri(), wait_until="load")
            page.wait_for_timeout(1500)  # the findings table's fonts settle
            page.screenshot(path=png)
        finally:
            browser.close()
    print(f"wrote {png}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: screenshot_report.py REPORT_DIR OUT.png")
    main(sys.argv[1], sys.argv[2])
