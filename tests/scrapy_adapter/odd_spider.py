"""A Scrapy spider whose pages go wrong in every way Scrapy handles: a callback that
raises, a 404, a 500 that stays a 500, an offsite link, a port nothing listens on."""

import scrapy


class OddSpider(scrapy.Spider):
    name = "scrapy-odd"
    custom_settings = {"RETRY_TIMES": 1, "ROBOTSTXT_OBEY": False,
                       "TELNETCONSOLE_ENABLED": False}  # fmt: skip

    def __init__(self, start=None, dead=None, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.dead = dead
        self.allowed_domains = ["127.0.0.1"]

    def parse(self, response):
        for path in ("/raises", "/missing", "/broken", "/fine"):
            yield response.follow(path, callback=self.parse_page)
        yield scrapy.Request("http://offsite.example/", callback=self.parse_page)
        yield scrapy.Request(self.dead, callback=self.parse_page)

    def parse_page(self, response):
        if response.url.endswith("/raises"):
            raise ValueError("the spider's own bug")
        yield {"sku": response.url.rsplit("/", 1)[-1]}
