"""Chromium for the console's browser tests: Debian's (`apt-get install chromium`), driven
by Playwright, never a browser downloaded at run time. Missing, the tests skip and say
why; with ``CI=true`` they fail instead (`.ci/run` installs it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.chromium import chromium_path
from tests.chromium import missing as _missing


@pytest.fixture
def chromium() -> Iterator[Any]:
    """A headless Chromium for one test. (Not one per session: Playwright's sync API keeps
    an event loop running in the thread while it is started, and the tests that come after
    in the same process, which call crashsafe.crawl(), would find it there and refuse.)"""
    path = chromium_path()
    if path is None:
        _missing("Chromium not found: apt-get install chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("Playwright not installed: pip install -e '.[dev]'")
    with sync_playwright() as p:
        # --no-sandbox: the tests may run as root (CI containers), where Chromium's sandbox
        # refuses to start.
        browser = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert errors == [], errors  # the page's own script never failed


def screenshot(page: Any, name: str) -> None:
    """Save the page as docs/img/NAME.png when CRASHSAFE_SCREENSHOTS names the folder
    (docs/console.md shows what a test run took)."""
    folder = os.environ.get("CRASHSAFE_SCREENSHOTS")
    if folder:
        page.screenshot(path=os.path.join(folder, f"{name}.png"), full_page=True)
