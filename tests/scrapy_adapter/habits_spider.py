"""A Scrapy spider that leans on Scrapy's own machinery: a redirect, a cookie the
CookiesMiddleware keeps, an errback that yields an item, and CloseSpider."""

import json
import os

import scrapy
from scrapy.exceptions import CloseSpider


class LogPipeline:
    def process_item(self, item, spider=None):
        with open(os.environ["PIPELINE_LOG"], "a") as out:
            out.write(json.dumps(dict(item)) + "\n")
        return item


class HabitsSpider(scrapy.Spider):
    name = "scrapy-habits"
    custom_settings = {"ROBOTSTXT_OBEY": False, "RETRY_TIMES": 0,
                       "TELNETCONSOLE_ENABLED": False,
                       "ITEM_PIPELINES": {f"{__name__}.LogPipeline": 300}}  # fmt: skip

    def __init__(self, start=None, dead=None, stop=None, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.dead, self.stop = dead, stop == "yes"

    def parse(self, response):
        yield response.follow("/moved", callback=self.parse_item)  # 302 to /item/moved
        yield response.follow("/login", callback=self.after_login)
        yield scrapy.Request(self.dead, callback=self.parse_item, errback=self.on_error)
        if self.stop:
            raise CloseSpider("asked to stop")

    def after_login(self, response):  # the cookie it set goes with the next request
        yield response.follow("/private", callback=self.parse_item)

    def parse_item(self, response):
        yield {"sku": response.url.rsplit("/", 1)[-1], "text": response.text}

    def on_error(self, failure):
        yield {"sku": "errback", "text": type(failure.value).__name__}
