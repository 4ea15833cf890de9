"""A run's own limits (`max_pages`, `max_items`, as Scrapy's CLOSESPIDER_*): it leases no
more once a commit reaches one, and only the pages already in flight finish. The commit
that reaches the limit refills no slot (it did: a run of max_pages=20 at concurrency 8
committed up to 34 pages)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from crashsafe import crawl, open_store
from crashsafe.demo.shop import ShopThread
from crashsafe.demo.spider import DemoShop

CONCURRENCY = 8


def done_and_records(db: str) -> tuple[int, int]:
    store = open_store(db)
    try:
        stats = store.stats(DemoShop.name)
    finally:
        store.close()
    return stats.done, stats.records


def test_a_page_limit_is_passed_by_at_most_the_pages_in_flight(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    site = shop(listings=25, per_listing=20)
    for run in range(3):  # (the old overshoot showed in about two runs of three)
        db = f"sqlite:///{tmp_path / f'pages{run}.db'}"
        crawl(DemoShop, db=db, start_urls=[f"{site.url}/list/0"], max_pages=20,
              concurrency=CONCURRENCY)  # fmt: skip
        done, _ = done_and_records(db)
        # the 20th page's commit leased nothing; at most 7 others were in flight
        assert 20 <= done <= 20 + CONCURRENCY - 1, (run, done)


def test_an_item_limit_leases_no_more_once_reached(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    site = shop(listings=25, per_listing=20)
    db = f"sqlite:///{tmp_path / 'items.db'}"
    crawl(DemoShop, db=db, start_urls=[f"{site.url}/list/0"], max_items=20,
          concurrency=CONCURRENCY)  # fmt: skip
    _, records = done_and_records(db)
    assert 20 <= records <= 20 + CONCURRENCY - 1  # (a product page yields one record)
