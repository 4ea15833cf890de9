"""Crawlee for Python's PlaywrightCrawler crawling the JavaScript demo shop (peer of
benchmarks/rendering.py), on the same Chromium as crashsafe, with persistent storage.

python benchmarks/peers/crawlee_render_shop.py START_URL CONCURRENCY STORAGE_DIR CHROMIUM
"""

import asyncio
import os
import sys


async def main() -> None:
    start, concurrency, storage, chromium = sys.argv[1], int(sys.argv[2]), *sys.argv[3:5]
    os.environ["CRAWLEE_STORAGE_DIR"] = storage
    os.environ.setdefault("CRAWLEE_PURGE_ON_START", "false")
    from crawlee import ConcurrencySettings
    from crawlee.crawlers import PlaywrightCrawler, PlaywrightCrawlingContext

    args = ["--disable-dev-shm-usage"] + (["--no-sandbox"] if os.geteuid() == 0 else [])
    crawler = PlaywrightCrawler(
        concurrency_settings=ConcurrencySettings(
            min_concurrency=concurrency,
            desired_concurrency=concurrency,
            max_concurrency=concurrency,
        ),
        max_requests_per_crawl=None,
        respect_robots_txt_file=True,
        headless=True,
        browser_type="chromium",
        browser_launch_options={"executable_path": chromium, "args": args},
        fingerprint_generator=None,  # as crashsafe: no fingerprint scripts injected
    )

    @crawler.pre_navigation_hook
    async def block(context: PlaywrightCrawlingContext) -> None:
        await context.block_requests()  # images and fonts, as crashsafe blocks them

    @crawler.router.default_handler
    async def handle(context: PlaywrightCrawlingContext) -> None:
        url = context.request.url
        if "/list/" in url:
            await context.enqueue_links(selector="a")
        else:
            page = context.page
            await page.wait_for_selector(".price")
            await context.push_data(
                {
                    "sku": await page.inner_text(".sku"),
                    "name": await page.inner_text(".name"),
                    "price": await page.inner_text(".price"),
                }
            )

    await crawler.run([start])


if __name__ == "__main__":
    asyncio.run(main())
