"""What the browser tests share: Debian's Chromium (never a downloaded browser) driven by playwright,
or a skip that says how to enable them."""

from __future__ import annotations

import pytest

from workbench.present.report import find_chromium

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]
ENABLE = "install Debian's chromium (apt-get install -y chromium; .ci/run does it) and the test extra (playwright)"


def chromium_or_skip() -> str:
    """The Chromium executable to launch; skips the test when it or playwright is missing."""
    browser = find_chromium()
    if browser is None:
        pytest.skip(f"no Chromium found: {ENABLE}")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip(f"playwright is not installed: {ENABLE}")
    return browser
