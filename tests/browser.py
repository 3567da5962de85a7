"""A real headless browser for the tests of pages: Debian's Chromium, driven by Playwright.

Playwright's own browser download needs the internet, which these machines
do not have; its Python package drives any Chromium given its path, so
Debian's (installed by tests/system_packages.py when missing) serves.

    from tests.browser import browser  # a fixture: import it into the test module

    def test_page(browser):
        page = browser.new_page()
        page.goto(url)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.system_packages import debian_program

# Without the background-networking flags Chromium keeps trying to reach
# Google's hosts, which the closed network refuses; --no-sandbox because the
# tests run as root.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """A headless Chromium (playwright.sync_api.Browser), closed after the module's tests."""
    chromium = debian_program("chromium", "chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=chromium, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()
