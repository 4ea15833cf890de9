"""crashsafe: data jobs that survive being killed.

Kill a crawl at any line, run the same command again, and it ends with exactly one
correct copy of every record, repeating at most the pages that were in flight.
"""

from __future__ import annotations

from crashsafe.crawl.engine import Crawler, CrawlResult
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.spider import Link, Page, Record, Spider
from crashsafe.errors import (
    ConfigError,
    CrashsafeError,
    SchemaError,
    SpiderLoadError,
    StoreError,
    WorkerBusyError,
)
from crashsafe.ids import canonical_url, record_id, stable_text_id
from crashsafe.store import Store, open_store

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "CrashsafeError",
    "CrawlResult",
    "CrawlSettings",
    "Crawler",
    "Link",
    "Page",
    "Record",
    "SchemaError",
    "Spider",
    "SpiderLoadError",
    "Store",
    "StoreError",
    "WorkerBusyError",
    "canonical_url",
    "open_store",
    "record_id",
    "stable_text_id",
]
