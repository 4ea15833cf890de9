"""crashsafe: data jobs that survive being killed.

Kill a crawl at any line, run the same command again, and it ends with exactly one
correct copy of every record, repeating at most the pages that were in flight.

Public names are imported on first use (PEP 562), so ``crashsafe batch ...`` does not pay
for the crawl engine's imports, nor a crawl for the LLM client's.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crashsafe.api import crawl, crawl_async
    from crashsafe.crawl.engine import Crawler, CrawlResult
    from crashsafe.crawl.failure import Failure, HttpError
    from crashsafe.crawl.forms import FormRequest
    from crashsafe.crawl.settings import CrawlSettings
    from crashsafe.crawl.spider import Link, Page, Record, Request, Spider
    from crashsafe.effects.files import File
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

_WHERE = {
    "Crawler": "crashsafe.crawl.engine",
    "CrawlResult": "crashsafe.crawl.engine",
    "CrawlSettings": "crashsafe.crawl.settings",
    "Failure": "crashsafe.crawl.failure",
    "FormRequest": "crashsafe.crawl.forms",
    "HttpError": "crashsafe.crawl.failure",
    "Link": "crashsafe.crawl.spider",
    "Page": "crashsafe.crawl.spider",
    "Record": "crashsafe.crawl.spider",
    "Request": "crashsafe.crawl.spider",
    "Spider": "crashsafe.crawl.spider",
    "File": "crashsafe.effects.files",
    "ConfigError": "crashsafe.errors",
    "CrashsafeError": "crashsafe.errors",
    "SchemaError": "crashsafe.errors",
    "SpiderLoadError": "crashsafe.errors",
    "StoreError": "crashsafe.errors",
    "WorkerBusyError": "crashsafe.errors",
    "canonical_url": "crashsafe.ids",
    "record_id": "crashsafe.ids",
    "stable_text_id": "crashsafe.ids",
    "Store": "crashsafe.store",
    "open_store": "crashsafe.store",
    "crawl": "crashsafe.api",
    "crawl_async": "crashsafe.api",
}

__all__ = [
    "ConfigError",
    "CrashsafeError",
    "CrawlResult",
    "CrawlSettings",
    "Crawler",
    "Failure",
    "File",
    "FormRequest",
    "HttpError",
    "Link",
    "Page",
    "Record",
    "Request",
    "SchemaError",
    "Spider",
    "SpiderLoadError",
    "Store",
    "StoreError",
    "WorkerBusyError",
    "canonical_url",
    "crawl",
    "crawl_async",
    "open_store",
    "record_id",
    "stable_text_id",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'crashsafe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
