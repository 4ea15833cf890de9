"""A spider that downloads each product's picture with its record.

crashsafe demo-site --port 8000 &
crashsafe crawl examples/shop_photos.py --db sqlite:///photos.db

Each record's "photo" is a reference to the stored file (files/ beside the database,
under its SHA-256): products that share a picture share one file.
"""

from crashsafe import Record, Spider


class ShopPhotos(Spider):
    name = "shop-photos"
    start_urls = ["http://127.0.0.1:8000/list/0"]

    def parse(self, page):
        if "/list/" in page.url:
            yield from page.follow_all(css="a::attr(href)")
        else:
            yield Record(
                key=page.css(".sku::text").get(),
                data={
                    "price": page.css(".price::text").get(),
                    "photo": page.download(page.css("img.photo::attr(src)").get()),
                },
            )
