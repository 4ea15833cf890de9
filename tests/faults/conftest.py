"""Fixtures of the fault suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crashsafe.store import Store, open_store


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A store on the test's database file, closed after the test."""
    s = open_store(db_url)
    yield s
    s.close()
