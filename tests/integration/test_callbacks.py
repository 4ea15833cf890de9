"""Callbacks given as bound methods reach that method after the round trip through the store
(#11 item 9): ``parse`` is the default, so only another method proves the callback was kept."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

from crashsafe import Crawler, Link, Page, Record, Spider
from crashsafe.demo.shop import ShopThread
from crashsafe.store import Store


class ByMethod(Spider):
    name = "by-method"

    def parse(self, page: Page) -> Iterator[Any]:
        if "/list/" in page.url:
            first, second, *rest = page.css("a.product::attr(href)").getall()
            yield page.follow(first, callback=self.parse_by_method)
            yield Link(page.urljoin(second), callback=self.parse_by_method)  # type: ignore[arg-type]
            yield from (page.follow(href) for href in rest)
        else:
            yield Record(key=page.css(".sku::text").get(), data={"via": "parse"})

    def parse_by_method(self, page: Page) -> Iterator[Any]:
        yield Record(key=page.css(".sku::text").get(), data={"via": "parse_by_method"})


def test_a_bound_method_callback_is_called_for_follow_and_link(
    shop: Callable[..., ShopThread], sqlite_store: Store
) -> None:
    site = shop(listings=1, per_listing=3, latency_ms=0)
    crawler = Crawler(
        ByMethod(),
        sqlite_store,
        settings=ByMethod.crawl_settings(),
        start_urls=[f"{site.url}/list/0"],
        handle_signals=False,
    )
    asyncio.run(asyncio.wait_for(crawler.run(), 60))
    via = {r.key: r.data["via"] for r in sqlite_store.iter_records("by-method")}
    assert via == {
        "SKU-00000": "parse_by_method",  # page.follow(..., callback=self.parse_by_method)
        "SKU-00001": "parse_by_method",  # Link(url, callback=self.parse_by_method)
        "SKU-00002": "parse",
    }
