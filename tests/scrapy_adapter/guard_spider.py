"""A Scrapy spider whose start page links to special addresses (the address guard's test):
``-a start=URL -a targets=URL,URL``. ``MapToCanary`` resolves every ``*.test`` name to
127.0.0.2, as a DNS name an attacker controls would."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy
from scrapy.resolver import CachingThreadedResolver
from twisted.internet import defer


class MapToCanary(CachingThreadedResolver):
    def getHostByName(self, name: str, timeout: Any = ()) -> Any:
        if name.endswith(".test"):
            return defer.succeed("127.0.0.2")
        return super().getHostByName(name, timeout)


class Guarded(scrapy.Spider):
    name = "guarded"
    custom_settings = {"RETRY_TIMES": 0, "ROBOTSTXT_OBEY": False}

    def __init__(self, start: str, targets: str = "", replay: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.targets = [t for t in targets.split(",") if t]
        self.replay = replay == "yes"  # an errback sends a refused request again

    def parse(self, response: Any) -> Iterator[Any]:
        if response.url.endswith("/start"):
            errback = self.again if self.replay else None
            for target in self.targets:
                yield scrapy.Request(target, callback=self.parse, errback=errback)
            yield {"sku": "start"}
        else:
            yield {"sku": response.url}

    def again(self, failure: Any) -> None:
        if not failure.request.meta.get("again"):
            again = failure.request.replace(dont_filter=True, errback=None)
            again.meta["again"] = True
            self.crawler.engine.crawl(again)
