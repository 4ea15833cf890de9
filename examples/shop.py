"""The spider from the README: crawl the demo shop.

crashsafe demo-site --port 8000 &
crashsafe crawl examples/shop.py --db sqlite:///shop.db
"""

from crashsafe import Record, Spider


class Shop(Spider):
    name = "example-shop"  # the record source
    start_urls = ["http://127.0.0.1:8000/list/0"]

    def parse(self, page):
        if "/list/" in page.url:
            yield from page.follow_all(css="a::attr(href)")
        else:
            yield Record(
                key=page.css(".sku::text").get(),
                data={"price": page.css(".price::text").get()},
            )
