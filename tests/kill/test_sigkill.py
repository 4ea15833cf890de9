"""The guarantee itself: SIGKILL `crashsafe crawl` at random moments, restart each time,
and the end result is exactly one correct record per product, with repeated requests
bounded by the pages in flight at the kills."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from crashsafe.demo.shop import ShopThread
from tests.helpers import exported, get_json, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args

CONCURRENCY = 8


@pytest.mark.slow
def test_five_sigkills_then_exactly_500_correct_records(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=25, per_listing=20, latency_ms=25)
    args = crawl_args(site, db_url, "--concurrency", str(CONCURRENCY))
    rng = random.Random(20261130)
    kills = 0
    restart_delays: list[float] = []
    for _ in range(5):
        before = get_json(f"{site.url}/stats")["requests"]
        started = time.time()
        proc = start_cli(*args)
        # Kill mid-crawl: once this run has fetched something, after a random pause.
        wait_for(lambda b=before: get_json(f"{site.url}/stats")["requests"] > b, timeout=90)
        first = get_json(f"{site.url}/log?since={started}")[0][0]
        restart_delays.append(first - started)
        time.sleep(rng.uniform(0.05, 0.4))
        assert proc.poll() is None, "the crawl finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    final = run_cli(*args)
    assert final.returncode == 0, final.stderr

    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    records = exported(db_url)
    catalogue = get_json(f"{site.url}/catalogue")
    server = get_json(f"{site.url}/stats")

    assert len(records) == 500
    assert len({r["key"] for r in records}) == 500
    assert {r["key"]: r["data"] for r in records} == {
        k: {"name": v["name"], "price": v["price"]} for k, v in catalogue.items()
    }
    assert all(r["version"] == 1 for r in records)
    assert server["distinct_pages"] == 525
    assert server["repeated"] <= CONCURRENCY * kills
    # The store's figures bracket the server's: a lease lost to a kill may or may not
    # have reached the server before the kill.
    assert row["requests"] - row["repeated"] <= server["requests"] <= row["requests"]
    assert row["repeated"] <= CONCURRENCY * kills
    # Each restart fetched at once: the dead worker's 60 s leases came back through its
    # liveness lock, not by expiring. The delay here is mostly Python starting up (under
    # a second on a quiet machine, printed below; over 5 s seen on a loaded CI machine):
    # bounded by half the lease, what only a lease taken back early can meet.
    assert max(restart_delays) < 30, restart_delays
    delays = [round(d, 2) for d in restart_delays]
    print(f"repeated: server {server['repeated']}, store {row['repeated']}; restarts {delays}")


def start_slow_crawl(
    shop: Callable[..., ShopThread], db_url: str
) -> tuple[ShopThread, list[str], subprocess.Popen[str]]:
    """A crawl of a 3-page shop answering in 1 s, under 60 s leases, once its first
    request is out."""
    site = shop(listings=1, per_listing=2, latency_ms=1000)
    args = crawl_args(site, db_url, "--lease-seconds", "60")
    proc = start_cli(*args)
    wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 1)
    return site, args, proc


def test_restart_after_sigkill_refetches_the_dead_workers_page_at_once(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    # Only /list/0 is known and the dead worker held it under a 60 s lease: the restart
    # can fetch it again only by reclaiming that lease through the liveness lock.
    site, args, proc = start_slow_crawl(shop, db_url)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    restarted = time.time()
    proc = start_cli(*args)
    try:
        wait_for(lambda: len(get_json(f"{site.url}/log?since={restarted}")) >= 1, timeout=90)
        [[when, path, _agent]] = get_json(f"{site.url}/log?since={restarted}")[:1]
        assert path == "/list/0"
        delay = when - restarted
        print(f"restart to first fetch: {delay:.2f} s")
        assert delay < 30  # not the 60 s lease expiry (start-up: see the test above)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _store_children(pid: int) -> list[int]:
    """PIDs of the store processes a crawl process started (Linux /proc)."""
    found = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        if b"crashsafe.store.server" in cmdline:
            found.append(int(child))
    return found


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_the_store_process_ends_with_its_crawler_and_frees_its_leases(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    _, args, proc = start_slow_crawl(shop, db_url)
    [store_pid] = _store_children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Orphaned, it sees its socket close and exits; its liveness lock goes with it.
    wait_for(lambda: not Path(f"/proc/{store_pid}").exists(), timeout=10)
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["leased"] == 1  # the lease is still there, but its owner is dead...
    final = run_cli(*args)  # ...so the next run takes it back at once, not in 60 s
    assert final.returncode == 0, final.stderr
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["done"] == 3 and row["leased"] == 0
