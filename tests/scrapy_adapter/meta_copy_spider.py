"""A Scrapy spider that hands a request's meta on, as Scrapy users do: to a request it
schedules with engine.crawl() from a callback still running, to one off its allowed
domains, to a retry its errback makes after the page failed, to a retry a callback asks
for (a captcha) and one an HttpError errback makes; and a downloader middleware that
sends a request on to another URL (as proxy-API middlewares do)."""

import asyncio

import scrapy
from scrapy.downloadermiddlewares.retry import get_retry_request


class Rewrite:
    def process_request(self, request, spider=None):
        if "/rw" in request.url:
            return request.replace(url=request.url.replace("/rw", "/rewritten"))
        return None


class MetaCopySpider(scrapy.Spider):
    name = "scrapy-meta-copy"
    allowed_domains = ["127.0.0.1"]
    custom_settings = {"TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False,
                       "RETRY_ENABLED": False, "DOWNLOAD_TIMEOUT": 1}  # fmt: skip

    def __init__(self, start=None, **kwargs):
        super().__init__(**kwargs)
        self.base = start

    async def start(self):
        yield scrapy.Request(f"{self.base}/p/1", callback=self.parse_first)
        yield scrapy.Request(f"{self.base}/slow", errback=self.failed)
        yield scrapy.Request(f"{self.base}/rw")
        yield scrapy.Request(f"{self.base}/captcha", callback=self.parse_captcha)
        yield scrapy.Request(f"{self.base}/f403", errback=self.refused)

    def parse(self, response):
        for li in response.css("li"):
            yield {"k": li.attrib["data-k"]}

    async def parse_first(self, response):
        crawl = self.crawler.engine.crawl
        crawl(scrapy.Request(f"{self.base}/p/2", meta=response.meta, callback=self.parse))
        crawl(scrapy.Request("http://other.example/x", meta=response.meta))
        await asyncio.sleep(0.5)  # (the other requests go out meanwhile)
        for item in self.parse(response):
            yield item

    def parse_captcha(self, response):
        if b"SOLVE-ME" in response.body:
            retry = get_retry_request(response.request, spider=self, reason="captcha")
            self.crawler.engine.crawl(retry.replace(callback=self.parse))
            return
        yield from self.parse(response)

    def failed(self, failure):  # a timeout: the page has failed; once more, meta and all
        yield failure.request.replace(dont_filter=True, callback=self.parse)

    def refused(self, failure):  # an HttpError, while the page is still leased
        self.crawler.engine.crawl(failure.request.replace(dont_filter=True, errback=None))
