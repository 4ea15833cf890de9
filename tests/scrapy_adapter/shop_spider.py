"""An ordinary Scrapy spider for the demo shop, as a Scrapy user writes one: callbacks,
meta, cb_kwargs, an errback, an item pipeline. The tests run it with and without the
crashsafe adapter's settings; nothing here knows about crashsafe."""

import json
import os

import scrapy


class CountingPipeline:
    """Appends every item it sees to $PIPELINE_LOG (items reach pipelines at least once)."""

    def process_item(self, item, spider=None):
        path = os.environ.get("PIPELINE_LOG")
        if path:
            with open(path, "a") as out:
                out.write(json.dumps(dict(item)) + "\n")
        return item


class ShopSpider(scrapy.Spider):
    name = "scrapy-shop"
    custom_settings = {
        "ITEM_PIPELINES": {f"{__name__}.CountingPipeline": 300},
        "ROBOTSTXT_OBEY": True,
        "RETRY_TIMES": 3,
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": False,
    }

    def __init__(self, start=None, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start or "http://127.0.0.1:8000/list/0"]

    def parse(self, response):
        listing = response.url.rsplit("/", 1)[-1]
        for href in response.css("a.product::attr(href)").getall():
            yield response.follow(
                href,
                callback=self.parse_product,
                meta={"listing": listing},
                cb_kwargs={"found_on": response.url},
                errback=self.failed,
            )
        for href in response.css("a.next::attr(href), a.page::attr(href)").getall():
            yield response.follow(href, callback=self.parse)

    def parse_product(self, response, found_on):
        yield {
            "sku": response.css(".sku::text").get(),
            "name": response.css(".name::text").get(),
            "price": response.css(".price::text").get(),
            "listing": response.meta["listing"],
            "found_on": found_on,
        }

    def failed(self, failure):
        self.logger.warning("request failed: %r", failure)
