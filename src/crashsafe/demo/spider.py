"""The demo spider: crawls the demo shop (``crashsafe demo-site``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crashsafe.crawl.spider import Page, Record, Spider
from crashsafe.ids import DEFAULT_STRIP_PARAMS


class DemoShop(Spider):
    """Follows listing pages and stores one record per product: sku, name, price.

    Point it at a shop with ``--start-url http://127.0.0.1:PORT/list/0``.
    """

    name = "demo-shop"
    start_urls = ["http://127.0.0.1:8000/list/0"]
    strip_query_params = (*DEFAULT_STRIP_PARAMS, "ref")

    def parse(self, page: Page) -> Iterator[Any]:
        if "/list/" in page.url:
            # Pagination first: the crawl keeps finding products while it fetches them.
            yield from page.follow_all(
                css="a.next::attr(href), a.page::attr(href), a.prev::attr(href)", priority=1
            )
            yield from page.follow_all(css="a.product::attr(href)")
        else:
            yield Record(
                key=page.css(".sku::text").get(),
                data={
                    "name": page.css(".name::text").get(),
                    "price": page.css(".price::text").get(),
                },
            )
