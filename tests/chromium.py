"""Debian's Chromium for the tests that drive a browser (`apt-get install chromium`), never
one downloaded at run time. Missing, those tests skip and say why; with ``CI=true`` they
fail instead (`.ci/run` installs it)."""

from __future__ import annotations

import os
import shutil

import pytest


def chromium_path() -> str | None:
    for name in (os.environ.get("CRASHSAFE_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (found := shutil.which(name)):
            return found
    return None


def missing(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: the browser tests must run; .ci/run installs it)")
    pytest.skip(why)


def required_chromium() -> str:
    """The Chromium to test with, and Playwright importable; else skip (fail in CI)."""
    path = chromium_path()
    if path is None:
        missing("Chromium not found: apt-get install chromium")
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        missing("Playwright not installed: pip install -e '.[dev]'")
    assert path is not None
    return path
