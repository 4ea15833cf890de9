"""A busy worker takes a dead peer's leases back within seconds, not when they expire."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

from crashsafe.demo.shop import ShopThread
from crashsafe.store import open_store
from tests.helpers import get_json, reaped, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args


def workers(db_url: str) -> list[dict[str, Any]]:
    """The workers `status` lists (none before the crawl has created its database)."""
    result = run_cli("status", "--db", db_url, "--json")
    rows = json.loads(result.stdout) if result.returncode == 0 else []
    return rows[0]["workers"] if rows else []  # type: ignore[no-any-return]


def test_a_busy_worker_takes_a_dead_peers_leases_at_once(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    # Listings link ten listings ahead: both workers always have due URLs (never idle).
    site = shop(listings=25, per_listing=20, latency_ms=60, pager=10)
    args = crawl_args(site, any_db_url, "--concurrency", "2", "--lease-seconds", "120")
    with reaped(start_cli(*args)) as busy, reaped(start_cli(*args)) as doomed:
        wait_for(lambda: len([w for w in workers(any_db_url) if w["leases"]]) == 2)
        store = open_store(any_db_url, create=False)  # (looked at from here: a status
        try:  # command takes up to 3 s to start on a loaded machine, and made this flaky)
            doomed.send_signal(signal.SIGKILL)
            doomed.wait()
            killed = time.monotonic()
            # Its 120 s leases come back through its liveness lock while the other is busy.
            wait_for(lambda: all(w.alive for w in store.workers("demo-shop")), timeout=90)
            taken = time.monotonic() - killed
        finally:
            store.close()
        assert busy.poll() is None, "the busy worker finished first: make the shop slower"
        # The peer watch looks every 5 s (2-4 s measured): within a quarter of the lease,
        # what only a lease taken back through the liveness lock can meet.
        assert taken < 30, taken
        busy.send_signal(signal.SIGINT)  # the rest of the crawl proves nothing more
        busy.communicate(timeout=60)
    assert busy.returncode == 130
    [row] = json.loads(run_cli("status", "--db", any_db_url, "--json").stdout)
    assert row["leased"] == 0 and row["workers"] == []  # nothing held by anybody
    assert get_json(f"{site.url}/stats")["repeated"] <= 2  # the dead worker's two pages
