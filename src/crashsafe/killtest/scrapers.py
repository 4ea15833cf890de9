"""The scrapers the kill test compares, and how to read what each one stored.

A scraper's ``name`` is its role: ``naive`` the peer, ``crashsafe`` the one whose
guarantee is checked; ``label`` is what the table calls it.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from crashsafe.demo.rendered import DemoShopRendered
from crashsafe.demo.spider import DemoShop
from crashsafe.errors import StoreError
from crashsafe.store import open_store

Row = tuple[str | None, str | None, str | None]  # sku, name, price


@dataclass(frozen=True, slots=True)
class Scraper:
    name: str
    effects: bool = False  # downloads pictures and writes a WARC archive too (crashsafe's)

    @property
    def label(self) -> str:
        return self.name

    def command(self, shop_url: str, workdir: Path, agent: str) -> list[str]:
        """The command line of one process, sending ``agent`` as its User-Agent."""
        raise NotImplementedError

    def rows(self, workdir: Path) -> list[Row]:
        raise NotImplementedError

    def cleanup(self, workdir: Path) -> None:
        """Remove what a run stored outside ``workdir`` (nothing, unless said so)."""


@dataclass(frozen=True, slots=True)
class NaiveScraper(Scraper):
    """Restarts from the first listing, auto-increment ids, commits as it goes."""

    name: str = "naive"

    def command(self, shop_url: str, workdir: Path, agent: str) -> list[str]:
        db = workdir / "naive.db"
        start = f"{shop_url}/list/0"
        return [sys.executable, "-m", "crashsafe.demo.naive", start, str(db), agent]

    def rows(self, workdir: Path) -> list[Row]:
        db = workdir / "naive.db"
        if not db.exists():
            return []
        with sqlite3.connect(db) as conn:
            try:
                return list(conn.execute("SELECT sku, name, price FROM products"))
            except sqlite3.OperationalError:  # killed before it created its table
                return []


@dataclass(frozen=True, slots=True)
class CrashsafeScraper(Scraper):
    """``crashsafe crawl`` of the demo spider, on an SQLite file in the run's folder, or
    on a schema of its own (``killtest_<pid>_<run>``) in the PostgreSQL database ``db``."""

    name: str = "crashsafe"
    concurrency: int = 4
    lease_ahead: int = 0
    backoff_base: float = 0.1
    db: str | None = None
    max_attempts: int = 5
    render: bool = False  # DemoShopRendered on a shop of JavaScript product pages

    def db_url(self, workdir: Path) -> str:
        if self.db is None:
            return f"sqlite:///{workdir / 'crashsafe.db'}"
        from crashsafe.store.postgres_urls import with_schema

        run = re.sub(r"[^a-z0-9_]", "_", workdir.name.lower())
        return with_schema(self.db, f"killtest_{os.getpid()}_{run}"[:63])

    def cleanup(self, workdir: Path) -> None:
        if self.db is not None:
            from crashsafe.store.postgres_urls import drop_schema

            drop_schema(self.db_url(workdir))

    def command(self, shop_url: str, workdir: Path, agent: str) -> list[str]:
        spider = "photos:DemoShopPhotos" if self.effects else "spider:DemoShop"
        if self.render:
            spider = "rendered:DemoShopRendered"
        effects = ["--files", str(workdir / "files"), "--warc", str(workdir / "warc")]
        return [
            sys.executable, "-m", "crashsafe", "crawl", f"crashsafe.demo.{spider}",
            "--db", self.db_url(workdir), "--start-url", f"{shop_url}/list/0",
            "--concurrency", str(self.concurrency), "--no-progress",
            "--set", f"backoff_base={self.backoff_base}", "--set", f"user_agent={agent}",
            "--set", f"lease_ahead={self.lease_ahead}",
            "--set", f"max_attempts={self.max_attempts}",
            *(effects if self.effects else []),
        ]  # fmt: skip

    def rows(self, workdir: Path) -> list[Row]:
        if self.db is None and not (workdir / "crashsafe.db").exists():
            return []
        try:
            store = open_store(self.db_url(workdir), readonly=True)
        except StoreError:  # killed before it stored anything
            return []
        try:
            return [
                (r.key, r.data.get("name"), r.data.get("price"))
                for r in store.iter_records(DemoShopRendered.name if self.render else DemoShop.name)
            ]
        finally:
            store.close()


@dataclass(frozen=True, slots=True)
class ScrapyScraper(Scraper):
    """An ordinary Scrapy spider of the demo shop (``crashsafe.killtest.scrapy_shop``):
    with JOBDIR (the peer, its items appended to a feed) or under crashsafe's adapter."""

    name: str = "naive"
    adapter: bool = False
    concurrency: int = 4

    @property
    def label(self) -> str:
        return "scrapy + crashsafe" if self.adapter else "scrapy JOBDIR"

    def command(self, shop_url: str, workdir: Path, agent: str) -> list[str]:
        cmd = [sys.executable, "-m", "crashsafe.killtest.scrapy_shop", f"{shop_url}/list/0",
               agent, str(self.concurrency)]  # fmt: skip
        if self.adapter:
            return [*cmd, "crashsafe", f"sqlite:///{workdir / 'scrapy.db'}"]
        return [*cmd, "jobdir", str(workdir / "jobdir"), str(workdir / "items.jsonl")]

    def rows(self, workdir: Path) -> list[Row]:
        if self.adapter:
            if not (workdir / "scrapy.db").exists():
                return []
            store = open_store(f"sqlite:///{workdir / 'scrapy.db'}", readonly=True)
            try:
                return [
                    (r.key, r.data.get("name"), r.data.get("price"))
                    for r in store.iter_records("scrapy-shop")
                ]
            finally:
                store.close()
        feed = workdir / "items.jsonl"
        rows: list[Row] = []
        if feed.exists():
            for line in feed.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    item = json.loads(line)
                except ValueError:
                    continue  # a line torn by a kill
                rows.append((item.get("sku"), item.get("name"), item.get("price")))
        return rows
