"""A Scrapy spider one of whose pages redirects off its allowed domains: Scrapy's offsite
filter drops the redirect before it reaches the scheduler."""

import scrapy


class OffsiteRedirectSpider(scrapy.Spider):
    name = "scrapy-offsite-redirect"
    allowed_domains = ["127.0.0.1"]
    custom_settings = {"ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False}

    def __init__(self, start=None, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]

    def parse(self, response):
        yield {"sku": response.url.rsplit("/", 1)[-1] or "start"}
        if response.url.endswith("/"):
            yield response.follow("/away")  # 302 to another domain
            yield response.follow("/here")
