"""The demo shop crawled by an ordinary Scrapy spider, for ``killtest --scraper scrapy``:
with Scrapy's JOBDIR (its resumable mode, items appended to a JSON Lines feed), or under
crashsafe's Scrapy adapter (items in a crashsafe store).

    python -m crashsafe.killtest.scrapy_shop START AGENT CONCURRENCY jobdir DIR FEED
    python -m crashsafe.killtest.scrapy_shop START AGENT CONCURRENCY crashsafe DB
"""

from __future__ import annotations

import sys
from typing import Any

import scrapy
from scrapy.crawler import CrawlerProcess


class ShopSpider(scrapy.Spider):
    name = "scrapy-shop"

    def __init__(self, start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]

    def parse(self, response: Any) -> Any:
        if "/list/" in response.url:
            yield from response.follow_all(css="a::attr(href)", callback=self.parse)
        else:
            yield {
                "sku": response.css(".sku::text").get(),
                "name": response.css(".name::text").get(),
                "price": response.css(".price::text").get(),
            }


def main() -> None:
    start, agent, concurrency, mode, *where = sys.argv[1:]
    settings: dict[str, Any] = {
        "CONCURRENT_REQUESTS": int(concurrency),
        "CONCURRENT_REQUESTS_PER_DOMAIN": int(concurrency),
        "USER_AGENT": agent,
        "ROBOTSTXT_OBEY": True,
        "RETRY_TIMES": 5,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
    }
    if mode == "jobdir":
        jobdir, feed = where
        settings["JOBDIR"] = jobdir
        settings["FEEDS"] = {feed: {"format": "jsonlines", "overwrite": False}}
    else:
        from crashsafe.contrib.scrapy import SETTINGS

        settings.update(SETTINGS)
        settings["CRASHSAFE_DB"] = where[0]
        settings["CRASHSAFE_ITEM_KEY"] = "sku"
    process = CrawlerProcess(settings)
    process.crawl(ShopSpider, start=start)
    process.start()


if __name__ == "__main__":
    main()
