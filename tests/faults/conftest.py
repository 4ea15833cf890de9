"""Fixtures of the fault suite."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from crashsafe import Crawler, Spider
from crashsafe.store import Store, open_store

TIME_LIMIT = 60  # seconds a fault-suite crawl may take: a bound on a hang, not a speed


def run_crawl(spider: Spider, store: Store, start: str, **options: Any) -> Any:
    """Crawl ``start`` with ``spider`` on ``store``; ``resolver=`` and ``metrics=`` go to
    the Crawler, every other option is a crawl setting."""
    resolver = options.pop("resolver", None)
    metrics = options.pop("metrics", None)
    crawler = Crawler(
        spider,
        store,
        settings=type(spider).crawl_settings(**options),
        start_urls=[start],
        handle_signals=False,
        resolver=resolver,
        metrics=metrics,
    )
    return asyncio.run(asyncio.wait_for(crawler.run(), TIME_LIMIT))


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """A store on the test's database file, closed after the test."""
    s = open_store(db_url)
    yield s
    s.close()
