"""A Scrapy spider whose pages end in ways Scrapy tells no middleware of crashsafe's: a
redirect off its allowed domains (the offsite filter drops it before the scheduler), a
redirect loop past REDIRECT_MAX_TIMES and a gzip body past DOWNLOAD_MAXSIZE (an
IgnoreRequest raised in a downloader middleware's process_response), and a middleware of
its own that skips what is not HTML (IgnoreRequest in process_response, on purpose) or
breaks (ValueError), which the test adds to DOWNLOADER_MIDDLEWARES."""

import scrapy
from scrapy.exceptions import IgnoreRequest


class SkipNonHtml:
    def process_response(self, request, response, spider=None):
        if request.url.endswith("/broken-mw"):
            raise ValueError("the middleware's own bug")
        if b"html" not in response.headers.get("Content-Type", b"text/html"):
            raise IgnoreRequest("not HTML")
        return response


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
            yield response.follow("/loop")  # 302 to /loop2, and back
            yield response.follow("/bomb")  # 200 KB once gunzipped
            yield response.follow("/doc.pdf", errback=self.failed)  # skipped on purpose
            yield response.follow("/broken-mw")  # a middleware raises
            yield response.follow("/e500", errback=self.on_500)  # HttpError to the errback
            yield from response.follow_all(["http://other.example/x"] * 2)  # offsite links

    def failed(self, failure):
        self.logger.warning("errback saw %r", failure.value)

    def on_500(self, failure):
        yield {"sku": "e500-errback"}
