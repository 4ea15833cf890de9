"""crashsafe's guarantee for existing Scrapy spiders (``pip install 'crashsafe[scrapy]'``).

Add to the project's settings (nothing in the spider changes)::

    SCHEDULER = "crashsafe.contrib.scrapy.CrashsafeScheduler"
    SPIDER_MIDDLEWARES = {"crashsafe.contrib.scrapy.CrashsafeSpiderMiddleware": 60}
    DOWNLOADER_MIDDLEWARES = {"crashsafe.contrib.scrapy.CrashsafeDownloaderMiddleware": 10,
                              "crashsafe.contrib.scrapy.CrashsafeAddressGuard": 950}
    CRASHSAFE_DB = "sqlite:///crawl.db"        # or postgresql://... for many processes
    CRASHSAFE_ITEM_KEY = "sku"                 # the field that identifies an item
    EXTENSIONS = {"scrapy.extensions.feedexport.FeedExporter": None,   # optional: feeds
                  "crashsafe.contrib.scrapy.CrashsafeFeeds": 0}        # from the store

Each response's items, the requests its callback yielded and its done mark are committed
in one transaction; a SIGKILLed ``scrapy crawl`` run again resumes, and the store holds
exactly one record per item (``crashsafe export --db ...``). See docs/scrapy.md.
"""

from crashsafe.contrib.scrapy.feeds import CrashsafeFeeds
from crashsafe.contrib.scrapy.guard import CrashsafeAddressGuard
from crashsafe.contrib.scrapy.middlewares import (
    CrashsafeDownloaderMiddleware,
    CrashsafeSpiderMiddleware,
)
from crashsafe.contrib.scrapy.scheduler import CrashsafeScheduler

__all__ = [
    "SETTINGS",
    "CrashsafeAddressGuard",
    "CrashsafeDownloaderMiddleware",
    "CrashsafeFeeds",
    "CrashsafeScheduler",
    "CrashsafeSpiderMiddleware",
]

#: The settings that turn the adapter on (merge them into a project's settings).
SETTINGS = {
    "SCHEDULER": "crashsafe.contrib.scrapy.CrashsafeScheduler",
    "SPIDER_MIDDLEWARES": {"crashsafe.contrib.scrapy.CrashsafeSpiderMiddleware": 60},
    "DOWNLOADER_MIDDLEWARES": {
        "crashsafe.contrib.scrapy.CrashsafeDownloaderMiddleware": 10,
        # Special addresses (loopback, private, cloud metadata) refused but for the start
        # URLs' own host and port and CRASHSAFE_ALLOWED_ADDRESSES (docs/security.md).
        "crashsafe.contrib.scrapy.CrashsafeAddressGuard": 950,
    },
    # Feeds (-o) written from the store when the crawl is complete, each item once.
    "EXTENSIONS": {
        "scrapy.extensions.feedexport.FeedExporter": None,
        "crashsafe.contrib.scrapy.CrashsafeFeeds": 0,
    },
}
