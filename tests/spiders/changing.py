"""The spider of tests/integration/test_continuous.py, loadable by the CLI from this file."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from crashsafe import Page, Record, Spider


class Pages(Spider):
    """Follows every link; a record per page but the site's root."""

    name = "changing"
    revisit_min, revisit_max = 60.0, 6000.0

    def parse(self, page: Page) -> Iterator[Any]:
        yield from page.follow_all(css="a::attr(href)")
        if page.url.rsplit("/", 1)[1] != "":
            yield Record(page.url, {"b": page.css("b::text").get()})


class Mapped(Spider):
    """Crawls what a sitemap lists."""

    name = "mapped"
    sitemap_urls = ["http://127.0.0.1:1/sitemap.xml"]  # the test's server replaces it
    revisit_min, revisit_max = 60.0, 400 * 86400.0

    def parse(self, page: Page) -> Iterator[Any]:
        yield Record(page.url, {"b": page.css("b::text").get()})


class Listed(Mapped):
    """Crawls what a sitemap lists; a record for each name in bold, on any page."""

    name = "listed"
    concurrency = 1  # /a, then /b: /b yields a record last

    def parse(self, page: Page) -> Iterator[Any]:
        for name in page.css("b::text").getall():
            yield Record(name, {"name": name})
