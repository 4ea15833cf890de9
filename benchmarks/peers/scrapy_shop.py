"""Scrapy crawling the demo shop, as a Scrapy user would write it (peer for peers.py).

python benchmarks/peers/scrapy_shop.py START_URL CONCURRENCY OUT.jsonl [JOBDIR | --crashsafe=DB]

With ``--crashsafe=DB`` the spider runs unmodified under crashsafe's Scrapy adapter
(crashsafe.contrib.scrapy: the store as its scheduler's queue, one transaction per
response), keyed by ``sku``.
"""

import sys

from scrapy.crawler import CrawlerProcess

from crashsafe.killtest.scrapy_shop import ShopSpider  # the kill test's spider, the same code


def main() -> None:
    start, concurrency, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    settings = {
        "CONCURRENT_REQUESTS": concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "ROBOTSTXT_OBEY": True,
        "LOG_LEVEL": "WARNING",
        "TELNETCONSOLE_ENABLED": False,
        "FEEDS": {out: {"format": "jsonlines"}},
    }
    if len(sys.argv) > 4 and sys.argv[4].startswith("--crashsafe="):
        from crashsafe.contrib.scrapy import SETTINGS

        settings.update(SETTINGS)
        settings["CRASHSAFE_DB"] = sys.argv[4].removeprefix("--crashsafe=")
        settings["CRASHSAFE_ITEM_KEY"] = "sku"
    elif len(sys.argv) > 4:
        settings["JOBDIR"] = sys.argv[4]
    process = CrawlerProcess(settings)
    process.crawl(ShopSpider, start=start)
    process.start()


if __name__ == "__main__":
    main()
