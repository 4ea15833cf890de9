"""`crashsafe status` lists the workers: host, pid, started, alive, leases, pages."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

from crashsafe.demo.shop import ShopThread
from tests.helpers import get_json, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args


def status(db_url: str) -> dict[str, Any]:
    result = run_cli("status", "--db", db_url, "--json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    return row  # type: ignore[no-any-return]


def test_status_lists_live_and_dead_workers(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=6, per_listing=20, latency_ms=400)
    # One page at a time: the crawl takes 50 s or more, so the worker is still alive for
    # every look below however slow a loaded machine makes them (at concurrency 4 it
    # finished between two of them once, and at 13 s a whole run on a machine loaded by
    # a Chromium crawl beside it was done before the last look: no worker to show).
    args = crawl_args(site, any_db_url, "--concurrency", "1")
    proc = start_cli(*args)
    try:
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 20)
        wait_for(lambda: bool(status(any_db_url)["workers"]))
        [worker] = status(any_db_url)["workers"]
        assert worker["alive"] and worker["crawl"] == "demo-shop" and worker["host"]
        assert worker["pid"] == proc.pid and worker["started_at"].startswith("20")
        assert worker["leases"] == 1 and worker["pages"] > 0
        seen = worker["last_seen"]  # noted by the worker every few seconds while it runs
        assert seen >= worker["started_at"]
        wait_for(lambda: status(any_db_url)["workers"][0]["last_seen"] > seen)
        compact = run_cli("status", "--db", any_db_url).stdout
        assert "workers   1 alive, 0 dead" in compact and f"pid {worker['pid']}: alive" in compact
        assert max(len(line) for line in compact.splitlines()) <= 80  # (#23 item 3)
        table = run_cli("status", "--db", any_db_url, "--wide").stdout
        assert "workers" in table and "leases held" in table and str(worker["pid"]) in table
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    # Killed: shown as dead while it still holds leases (nobody has taken them back yet).
    wait_for(lambda: not status(any_db_url)["workers"][0]["alive"])
    [dead] = status(any_db_url)["workers"]
    assert dead["pid"] == worker["pid"] and dead["leases"] > 0
    final = run_cli(*crawl_args(site, any_db_url, "--concurrency", "16"))
    assert final.returncode == 0, final.stderr
    row = status(any_db_url)
    assert row["done"] == 126 and row["workers"] == []  # finished workers are not listed
