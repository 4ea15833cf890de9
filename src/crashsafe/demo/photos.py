"""The demo spider that also downloads each product's picture (``killtest --effects``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crashsafe.crawl.spider import Page, Record
from crashsafe.demo.spider import DemoShop


class DemoShopPhotos(DemoShop):
    """:class:`DemoShop` whose records also hold ``photo``: a reference to the product's
    picture, downloaded and stored once per content."""

    def parse(self, page: Page) -> Iterator[Any]:
        for item in super().parse(page):
            if isinstance(item, Record):
                src = page.css("img.photo::attr(src)").get()
                item = Record(key=item.key, data={**item.data, "photo": page.download(src)})
            yield item
