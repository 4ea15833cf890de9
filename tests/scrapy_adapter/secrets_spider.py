"""A Scrapy spider whose start page yields requests carrying secrets (the adapter's
sealing test): ``-a start=URL -a proxy=http://user:password@host:port``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import scrapy


class Secrets(scrapy.Spider):
    name = "secrets"
    custom_settings = {"ROBOTSTXT_OBEY": False}

    def __init__(self, start: str, proxy: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.start_urls = [start]
        self.proxy = proxy

    def parse(self, response: Any) -> Iterator[Any]:
        yield {"sku": "start"}
        yield scrapy.Request(
            response.urljoin("/api"),
            headers={"Authorization": "Bearer S3CRET-T0KEN", "X-Api-Key": "K3Y-VALUE"},
            cookies={"sid": "C00KIE-VALUE"},
            meta={"proxy": self.proxy},
            callback=self.parse_api,
        )
        yield scrapy.FormRequest(
            response.urljoin("/login"), formdata={"user": "me", "password": "PA55W0RD"},
            callback=self.parse_api,
        )  # fmt: skip
        yield scrapy.Request(
            response.urljoin("/old-login"), method="POST",
            body="user=m\xe9&pass=L4TIN-PW".encode("latin-1"), callback=self.parse_api,
        )  # fmt: skip

    def parse_api(self, response: Any) -> Iterator[Any]:
        yield {"sku": response.url}
