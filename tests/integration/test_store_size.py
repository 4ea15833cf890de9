"""A store that stays small (#29 item 4) from the command line: `deliver` prunes the
events it delivered once they are older than --prune-after, `vacuum` prunes and compacts,
and refuses to rewrite an SQLite file a crawl is writing."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable

from crashsafe import open_store
from crashsafe.demo.shop import ShopThread
from tests.helpers import run_cli
from tests.integration.test_cli import crawl_args
from tests.integration.test_deliver import Endpoint, deliver


def outbox_rows(db_url: str) -> int:
    with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db:
        return int(db.execute("SELECT count(*) FROM outbox").fetchone()[0])


def test_deliver_prunes_what_it_delivered_once_older_than_the_retention(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    ep = endpoint(lambda _id, n: (200, {}))
    done = deliver(crawled, ep.url)  # the default keeps 30 days
    assert done.returncode == 0, done.stderr
    assert "delivered 5," in done.stderr and "pruned" not in done.stderr
    assert outbox_rows(crawled) == 5
    kept = deliver(crawled, ep.url, "--prune-after", "never")
    assert kept.returncode == 0 and outbox_rows(crawled) == 5
    pruned = deliver(crawled, ep.url, "--prune-after", "0s")
    assert pruned.returncode == 0, pruned.stderr
    assert "pruned 5 old events and 5 of their deliveries (--prune-after)" in pruned.stderr
    assert outbox_rows(crawled) == 0 and len(ep.hits) == 5  # nothing sent twice
    bad = deliver(crawled, ep.url, "--prune-after", "soon")
    assert bad.returncode == 1 and "--prune-after 'soon': give a duration" in bad.stderr


def test_vacuum_compacts_an_sqlite_file_and_refuses_while_a_crawl_writes_it(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=2, per_listing=10)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    done = run_cli("vacuum", "--db", db_url, "--prune-after", "30d")
    assert done.returncode == 0, done.stderr
    assert "demo-shop: pruned 0 events older than 30d and 0 of their deliveries" in done.stdout
    # (the run just ended: its grants stay rows for FOLD_GRACE, its figures read)
    assert "demo-shop: 0 lease grants folded into counts" in done.stdout
    assert " MB after VACUUM" in done.stdout
    store = open_store(db_url)
    try:
        store.register_worker("demo-shop")  # a live worker: its lock is held by this process
        refused = run_cli("vacuum", "--db", db_url)
    finally:
        store.close()
    assert refused.returncode == 1
    assert "1 worker(s) are running on this database" in refused.stderr
    assert run_cli("vacuum", "--db", db_url).returncode == 0  # once it is gone


def test_vacuum_on_postgresql_vacuums_the_crawls_tables(
    shop: Callable[..., ShopThread], pg_url: str
) -> None:
    site = shop(listings=1, per_listing=5)
    assert run_cli(*crawl_args(site, pg_url)).returncode == 0
    done = run_cli("vacuum", "--db", pg_url)
    assert done.returncode == 0, done.stderr
    assert "after VACUUM (ANALYZE)" in done.stdout and "autovacuum" in done.stdout
