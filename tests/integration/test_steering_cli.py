"""`crashsafe pause|resume|cancel` on running crawls (#27 item 2), on both backends: a
paused crawl's site sees no request until it is resumed, a cancelled crawl's workers end
with exit status 6 and a rerun completes exactly, a paused origin waits while the others
go on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from crashsafe.demo.shop import ShopThread
from tests.helpers import exported, get_json, reaped, run_cli, start_cli, wait_for, wait_for_line
from tests.integration.test_cli import crawl_args

CANCELLED = 6


def status(db_url: str) -> dict[str, Any]:
    result = run_cli("status", "--db", db_url, "--json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    return row  # type: ignore[no-any-return]


def alive_workers(db_url: str) -> int:
    """Live workers as `status` shows them (0 before the crawl has made its database)."""
    result = run_cli("status", "--db", db_url, "--json")
    if result.returncode != 0:
        return 0
    return sum(w["alive"] for row in json.loads(result.stdout) for w in row["workers"])


def steer(*args: str) -> str:
    result = run_cli(*args, "--by", "tester")
    assert result.returncode == 0, result.stderr
    return result.stdout


def exact(site: ShopThread, db_url: str) -> None:
    """Every product stored once, as the shop has it."""
    truth = get_json(f"{site.url}/catalogue")
    records = exported(db_url)
    assert len(records) == len(truth)
    assert {r["key"]: {"sku": r["key"], **r["data"]} for r in records} == truth


def test_pause_stops_the_requests_and_resume_completes_exactly(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    # 210 pages, two at a time, 100 ms each: 10 s at least, however fast the machine, so
    # the pause comes long before the end however slowly the commands start.
    site = shop(listings=10, per_listing=20, latency_ms=100)
    with reaped(start_cli(*crawl_args(site, any_db_url, "--concurrency", "2"))) as proc:
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 10)
        said = steer("pause", "--db", any_db_url)
        assert "paused crawl demo-shop" in said and "crashsafe resume" in said
        wait_for_line(proc.stderr, "paused by tester")  # (the worker says so, within 1 s)
        wait_for(lambda: status(any_db_url)["leased"] == 0)  # what was in flight committed
        drained = time.time()
        row = status(any_db_url)
        assert row["paused"]["by"] == "tester" and row["pending"] > 0
        assert "PAUSED    by tester" in run_cli("status", "--db", any_db_url).stdout
        resumed = time.time()
        assert "resumed crawl demo-shop" in steer("resume", "--db", any_db_url)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    log = get_json(f"{site.url}/log?since={drained}")
    assert [t for t, _, _ in log if t < resumed] == []  # nothing while it was paused
    assert get_json(f"{site.url}/stats")["repeated"] == 0
    exact(site, any_db_url)
    actions = run_cli("audit", "--db", any_db_url).stdout
    assert "demo-shop  resume  by tester" in actions and "demo-shop  pause  by tester" in actions


def test_cancel_ends_every_workers_run_and_a_rerun_completes_exactly(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=10, per_listing=20, latency_ms=200)  # 210 pages, 10 s at least
    args = crawl_args(site, any_db_url, "--concurrency", "2")
    with reaped(start_cli(*args)) as one, reaped(start_cli(*args)) as two:
        wait_for(lambda: alive_workers(any_db_url) == 2)
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 10)
        assert "asked 2 worker(s)" in steer("cancel", "--db", any_db_url)
        for proc in (one, two):
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == CANCELLED, err
            assert "Cancelled by tester" in err and "run the same command again" in err
    row = status(any_db_url)
    assert row["leased"] == 0 and 0 < row["done"] < 210  # given back, not left leased
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert get_json(f"{site.url}/stats")["repeated"] == 0  # each page fetched once in all
    exact(site, any_db_url)
    actions = run_cli("audit", "--db", any_db_url).stdout
    assert "demo-shop  cancel (2 worker(s))  by tester" in actions


def test_a_paused_origin_waits_while_the_others_are_crawled(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    a = shop(listings=2, per_listing=10, latency_ms=5)
    b = shop(listings=2, per_listing=10, latency_ms=5)
    args = crawl_args(a, any_db_url, "--concurrency", "4", "--start-url", f"{b.url}/list/0")
    # The crawl's database exists before it starts: pause b first, then crawl both.
    first = run_cli(*crawl_args(a, any_db_url, "--set", "max_pages=1"))
    assert first.returncode == 0, first.stderr
    said = steer("pause", "--db", any_db_url, "--origin", b.url + "/")
    assert f"paused origin {b.url} of crawl demo-shop" in said
    with reaped(start_cli(*args)) as proc:
        wait_for_line(proc.stderr, f"paused origin(s) {b.url} (by tester)")
        wait_for(lambda: get_json(f"{a.url}/stats")["distinct_pages"] == 22)
        wait_for(lambda: status(any_db_url)["leased"] == 0)
        assert get_json(f"{b.url}/stats")["requests"] == 0  # not even its robots.txt
        assert get_json(f"{b.url}/stats")["robots"] == 0
        assert proc.poll() is None  # waits for the paused origin, does not give up on it
        steer("resume", "--db", any_db_url, "--origin", b.url)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    for site in (a, b):
        stats = get_json(f"{site.url}/stats")
        assert stats["distinct_pages"] == 22 and stats["repeated"] == 0
    assert status(any_db_url)["done"] == 44


def test_steering_says_what_is_wrong(tmp_path: Any, shop: Callable[..., ShopThread]) -> None:
    db = f"sqlite:///{tmp_path / 'x.db'}"
    site = shop(listings=1, per_listing=1)
    assert run_cli(*crawl_args(site, db)).returncode == 0
    bad = run_cli("pause", "--db", db, "--origin", "example.com")
    assert bad.returncode == 1 and "give scheme://host[:port]" in bad.stderr
    bad = run_cli("pause", "--db", db, "--origin", f"{site.url}/list/0")
    assert bad.returncode == 1 and "an origin has no path" in bad.stderr
    bad = run_cli("pause", "--db", db, "--crawl", "nope")
    assert bad.returncode == 1 and "no crawl named 'nope'" in bad.stderr
    assert "was not paused" in run_cli("resume", "--db", db).stdout
    typo = run_cli("pause", "--db", db, "--origin", "http://127.0.0.1:1")
    assert typo.returncode == 0 and "has no URL of http://127.0.0.1:1 yet (a typo?)" in typo.stderr
    assert "no worker of crawl demo-shop is running" in run_cli("cancel", "--db", db).stdout
