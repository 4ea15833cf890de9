"""SQLite's WAL stays bounded (issue #22 item 4): an export whose output nobody reads
holds no snapshot, and the crawl checkpoints and truncates a WAL that grew, warning when
a reader holds it back."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from crashsafe import Crawler
from crashsafe.crawl import upkeep
from crashsafe.demo.shop import ShopThread
from crashsafe.demo.spider import DemoShop
from crashsafe.store import open_store, sqlite
from tests.helpers import CLI, cli_env, reaped, run_cli


def crawl_args(site: ShopThread, db: str) -> list[str]:
    return ["crawl", "crashsafe.demo.spider:DemoShop", "--db", db, "--no-progress",
            "--start-url", f"{site.url}/list/0"]  # fmt: skip


def test_an_export_nobody_reads_does_not_pin_the_wal_of_a_crawl(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    db_path = tmp_path / "shop.db"
    db = f"sqlite:///{db_path}"
    site = shop(listings=20, per_listing=100)
    assert run_cli(*crawl_args(site, db)).returncode == 0  # 2 020 pages, 2 000 records
    # an export into a pipe nobody reads: it writes 64 KiB, then blocks mid-way
    export = subprocess.Popen([*CLI, "export", "--db", db], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=cli_env())  # fmt: skip
    with reaped(export):
        assert export.stdout is not None
        assert export.stdout.read(1000)  # it has begun (and holds its place in the file)
        assert run_cli("recrawl", "--db", db).returncode == 0
        assert run_cli(*crawl_args(site, db)).returncode == 0  # every page again
        assert export.poll() is None  # still blocked on its output
        # One long read transaction held the WAL for the whole pass (about 15 KB a
        # page, 30 MB here); read a page at a time, the export lets checkpoints through.
        wal = db_path.with_name("shop.db-wal")
        assert not wal.exists() or wal.stat().st_size < sqlite.WAL_TRUNCATE_BYTES
        export.kill()


def test_a_reader_that_holds_the_wal_back_is_warned_of(
    shop: Callable[..., ShopThread],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(upkeep, "TEND_WAL_EVERY", 0.1)
    monkeypatch.setattr(sqlite, "WAL_TRUNCATE_BYTES", 64 * 1024)
    db_path = tmp_path / "held.db"
    store = open_store(f"sqlite:///{db_path}")
    reader = sqlite3.connect(db_path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM records").fetchone()  # a snapshot, held
    site = shop(listings=10, per_listing=100, latency_ms=2)
    try:
        crawler = Crawler(DemoShop(), store, start_urls=[f"{site.url}/list/0"],
                          handle_signals=False, store_process=False)  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="crashsafe.crawl"):
            asyncio.run(crawler.run())
        warned = [r.getMessage() for r in caplog.records if "old snapshot" in r.getMessage()]
        assert warned and f"the WAL of sqlite:///{db_path} is" in warned[0]
        wal = db_path.with_name("held.db-wal")
        assert wal.stat().st_size > 1e6  # held: it could only grow
        reader.execute("COMMIT")  # the reader ends its transaction...
        state = store.tend_wal()
        assert state is not None and not state.held
        assert wal.stat().st_size == 0  # ...and the next look truncates it
    finally:
        reader.close()
        store.close()
