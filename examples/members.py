"""A spider written the Scrapy way, for the members-only demo shop (docs/scrapy.md).

It logs in with a POST (the session cookie is kept, and stored, so a restarted crawl is
still logged in), sends a default header, pages through a JSON search API by POST with a
body per page, carries the category from the search to the product in ``meta``, passes
``cb_kwargs``, yields plain dicts and dataclasses keyed by ``item_key``, and reads a
gzipped sitemap.

    crashsafe demo-site --members --port 8001 &
    crashsafe crawl examples/members.py --db sqlite:///members.db -o members.jsonl
"""

import json
import os
from dataclasses import dataclass
from urllib.parse import urlencode

from crashsafe import Request, Spider

SITE = os.environ.get("MEMBERS_SITE", "http://127.0.0.1:8001")


@dataclass
class Guide:
    sku: str
    title: str


class MembersShop(Spider):
    name = "members-shop"
    start_urls = [f"{SITE}/login"]
    sitemap_urls = [f"{SITE}/sitemap.xml.gz"]
    sitemap_rules = [("/guide/", "parse_guide")]
    item_key = "sku"  # the field that identifies an item (dicts, dataclasses...)
    default_headers = {"X-Shop-Client": "crashsafe"}

    def parse(self, page):  # the login form
        token = page.css("input[name=csrf]::attr(value)").get()
        yield Request(
            page.urljoin("/login"),
            method="POST",
            body=urlencode({"user": "demo", "password": "secret", "csrf": token}),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            callback=self.after_login,
        )

    def after_login(self, page):  # redirected to /account, logged in
        for link in page.css("a.category"):
            yield page.follow(
                link.attrib["href"],
                callback=self.parse_category,
                meta={"category": link.css("::text").get()},
            )

    def parse_category(self, page):
        api = page.css("#search::attr(data-api)").get()
        yield self.search(page, api, page.meta["category"], 0)

    def search(self, page, api, category, number):
        return Request(
            page.urljoin(api),
            method="POST",
            body=json.dumps({"category": category, "page": number}),
            headers={"Content-Type": "application/json"},
            callback=self.parse_search,
            meta={"category": category, "api": api},
            cb_kwargs={"number": number},
        )

    def parse_search(self, page, number):
        found = page.json()
        category = page.meta["category"]
        for pid in found["products"]:
            yield page.follow(
                f"/product/{pid}", callback=self.parse_product, meta={"category": category}
            )
        if found["next_page"] is not None:
            yield self.search(page, page.meta["api"], category, found["next_page"])

    def parse_product(self, page):
        yield {
            "sku": page.css(".sku::text").get(),
            "name": page.css(".name::text").get(),
            "price": page.css(".price::text").get(),
            "category": page.meta["category"],
        }

    def parse_guide(self, page):
        slug = page.url.rstrip("/").rsplit("/", 1)[-1]
        yield Guide(sku=f"guide:{slug}", title=page.css(".title::text").get())
