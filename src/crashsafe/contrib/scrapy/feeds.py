"""Scrapy feeds (``FEEDS``, ``-o``/``-O``) written from the crashsafe store when the crawl
is complete: each item once, however often the crawl was killed and restarted.

``CrashsafeFeeds`` takes the place of Scrapy's FeedExporter (which writes what the
pipelines saw in one run: after a kill, a feed misses the items earlier runs committed,
and may repeat one). When the spider closes with reason ``finished``, every local feed
(a path or ``file://`` URI; format ``jsonlines``/``jsonl``/``jl``, ``json`` or ``csv``) is
written whole from the stored items (as the pipelines left them) to a temporary file,
fsync'd and renamed over it: appending would repeat items. A crawl that stopped early
writes nothing: the run that completes it does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from scrapy import Spider, signals
from scrapy.crawler import Crawler

from crashsafe.contrib.scrapy.frontier import logger
from crashsafe.exports import write_rows
from crashsafe.files import atomic_text
from crashsafe.store import open_store

FORMATS = {"jsonlines": "jsonl", "jsonl": "jsonl", "jl": "jsonl", "json": "json", "csv": "csv"}


def local_path(uri: str) -> Path | None:
    """The file a feed URI names, or None for a remote one (s3://, ftp://...)."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    if parts.scheme and len(parts.scheme) > 1:  # (a Windows drive letter is one letter)
        return None
    return Path(uri)


class CrashsafeFeeds:
    """``EXTENSIONS = {"scrapy.extensions.feedexport.FeedExporter": None,
    "crashsafe.contrib.scrapy.CrashsafeFeeds": 0}`` (in the adapter's SETTINGS)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.feeds: dict[str, Any] = dict(crawler.settings.getdict("FEEDS"))

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrashsafeFeeds:
        extension = cls(crawler)
        crawler.signals.connect(extension.spider_closed, signal=signals.spider_closed)
        return extension

    def spider_closed(self, spider: Spider, reason: str) -> None:
        frontier = getattr(self.crawler, "crashsafe_frontier", None)
        if not self.feeds or frontier is None:
            return
        if reason != "finished":
            logger.warning("feeds not written: the crawl stopped (%s); the run that "
                           "completes it writes them", reason)  # fmt: skip
            return
        for uri, options in self.feeds.items():
            path = local_path(str(uri))
            fmt = FORMATS.get(str((options or {}).get("format", "jsonlines")).lower())
            if path is None or fmt is None:
                why = "crashsafe writes local files as jsonlines, json or csv"
                logger.warning("feed %s not written: %s (crashsafe export can too)", uri, why)
                continue
            self._write(frontier.db, frontier.crawl_name, path, fmt)

    @staticmethod
    def _write(db: str, crawl: str, path: Path, fmt: str) -> None:
        store = open_store(db, create=False, readonly=True)
        try:
            with atomic_text(path) as out:
                written = write_rows(lambda: (r.data for r in store.iter_records(crawl)), out, fmt)
        finally:
            store.close()
        logger.info("wrote %d item(s) to %s from the crashsafe store", written.rows, path)
