"""PostgreSQL going away under a crawl: a server restarted (cleanly, or as if it
crashed), connections cut by pg_terminate_backend, a server that stays down. A private
cluster of the test's own is restarted; never the machine's shared server."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from crashsafe.demo.shop import ShopThread
from tests import pg
from tests.helpers import exported, get_json, reaped, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[pg.PrivateCluster]:
    yield from pg.private_cluster()


@pytest.fixture
def db(cluster: pg.PrivateCluster) -> str:
    return pg.fresh_schema_url(cluster.url)


def requests(site: ShopThread) -> int:
    return int(get_json(f"{site.url}/stats")["requests"])


def exact(site: ShopThread, db_url: str) -> dict[str, Any]:
    """Every product stored once with the shop's values; the status row."""
    records = exported(db_url)
    catalogue = get_json(f"{site.url}/catalogue")
    assert len(records) == len(catalogue)
    assert {r["key"]: r["data"] for r in records} == {
        k: {"name": v["name"], "price": v["price"]} for k, v in catalogue.items()
    }
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["pending"] == 0 and row["leased"] == 0 and row["failed"] == 0
    return row  # type: ignore[no-any-return]


def crawl_through(
    site: ShopThread, db_url: str, faults: list[Callable[[], None]]
) -> subprocess.CompletedProcess[str]:
    """Crawl, applying each fault once the crawl has made 80 more requests; then let it
    finish by itself."""
    proc = start_cli(*crawl_args(site, db_url, "--concurrency", "4"))
    with reaped(proc):
        for fault in faults:
            mark = requests(site) + 80
            wait_for(lambda mark=mark: requests(site) >= mark or proc.poll() is not None)
            assert proc.poll() is None, "the crawl ended before the fault: make the shop slower"
            fault()
        out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_crawl_survives_two_server_restarts(
    shop: Callable[..., ShopThread], cluster: pg.PrivateCluster, db: str
) -> None:
    site = shop(listings=25, per_listing=20, latency_ms=20)
    result = crawl_through(
        site,
        db,
        [cluster.restart, lambda: cluster.restart("immediate")],  # then a crash
    )
    assert result.returncode == 0, result.stderr
    assert "lost the connection" in result.stderr and "reconnected" in result.stderr
    assert "error ignored terminating" not in result.stderr  # psycopg's noise (#22 item 6)
    row = exact(site, db)
    assert row["done"] == 525
    # In flight at each restart: at most the 4 pages a worker holds were fetched again.
    assert get_json(f"{site.url}/stats")["repeated"] <= 2 * 4


def test_connections_cut_by_the_server_are_reopened(
    shop: Callable[..., ShopThread], cluster: pg.PrivateCluster, db: str
) -> None:
    import psycopg

    def cut() -> None:
        with psycopg.connect(cluster.url, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = 'crashsafe' AND pid <> pg_backend_pid()"
            ).fetchone()
            assert cut is not None and cut[0] >= 1

    site = shop(listings=25, per_listing=20, latency_ms=20)
    result = crawl_through(site, db, [cut, cut, cut])
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("lost the connection") >= 1
    assert "error ignored terminating" not in result.stderr
    exact(site, db)


def test_a_server_that_stays_down_ends_the_crawl_with_one_clear_line(
    shop: Callable[..., ShopThread], cluster: pg.PrivateCluster, db: str
) -> None:
    site = shop(listings=25, per_listing=20, latency_ms=20)
    waiting = f"{db}&reconnect_seconds=3"
    started = time.monotonic()
    try:
        result = crawl_through(site, waiting, [cluster.stop])
    finally:
        cluster.start()
    assert result.returncode == 1
    assert "no connection for 3 s" in result.stderr
    assert "run the same command again once the server is back" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60
    # nothing half-written: the same command, with the server back, ends exact
    final = run_cli(*crawl_args(site, db, "--concurrency", "4"))
    assert final.returncode == 0, final.stderr
    exact(site, db)
