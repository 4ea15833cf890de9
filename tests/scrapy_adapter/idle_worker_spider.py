"""A Scrapy spider whose engine asks its scheduler for work only when something wakes
it: Scrapy's 5 s heartbeat is set to an hour, so a worker that found nothing to lease
and has nothing under way waits for a wake-up of crashsafe's own."""

import scrapy
from scrapy.core.engine import ExecutionEngine

ExecutionEngine._SLOT_HEARTBEAT_INTERVAL = 3600


class IdleWorkerSpider(scrapy.Spider):
    name = "scrapy-idle-worker"
    custom_settings = {"TELNETCONSOLE_ENABLED": False, "ROBOTSTXT_OBEY": False}

    def __init__(self, start=None, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]

    def parse(self, response):
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse_item)

    def parse_item(self, response):
        yield {"sku": response.url.rsplit("/", 1)[-1]}
