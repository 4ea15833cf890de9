"""Crawlee for Python crawling the demo shop with its persistent storage (peer).

python benchmarks/peers/crawlee_shop.py START_URL CONCURRENCY STORAGE_DIR
"""

import asyncio
import os
import sys


async def main() -> None:
    start, concurrency, storage = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    os.environ["CRAWLEE_STORAGE_DIR"] = storage
    os.environ.setdefault("CRAWLEE_PURGE_ON_START", "false")
    from crawlee import ConcurrencySettings
    from crawlee.crawlers import ParselCrawler, ParselCrawlingContext

    crawler = ParselCrawler(
        concurrency_settings=ConcurrencySettings(
            min_concurrency=concurrency,
            desired_concurrency=concurrency,
            max_concurrency=concurrency,
        ),
        max_requests_per_crawl=None,
        respect_robots_txt_file=True,
    )

    @crawler.router.default_handler
    async def handle(context: ParselCrawlingContext) -> None:
        url = context.request.url
        if "/list/" in url:
            await context.enqueue_links(selector="a")
        else:
            sel = context.selector
            await context.push_data(
                {
                    "sku": sel.css(".sku::text").get(),
                    "name": sel.css(".name::text").get(),
                    "price": sel.css(".price::text").get(),
                }
            )

    await crawler.run([start])


if __name__ == "__main__":
    asyncio.run(main())
