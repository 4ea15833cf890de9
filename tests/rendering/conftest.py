"""Fixtures of the rendering tests: Chromium (skipped where missing, but under CI=true)."""

from __future__ import annotations

import pytest

from tests.chromium import required_chromium


@pytest.fixture
def chromium() -> str:
    return required_chromium()
