"""The crawl engine against a misbehaving site on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from crashsafe import Crawler, Page, Record, Spider, open_store
from crashsafe.crawl.engine import MAX_FAILED_COMMITS
from crashsafe.demo.server import AppThread
from crashsafe.demo.shop import ShopThread
from crashsafe.demo.spider import DemoShop
from crashsafe.errors import StoreError
from crashsafe.store import Store
from crashsafe.store.process import StoreProcess
from tests.helpers import run_cli

LINKS = [
    "/ok/1", "/ratelimited", "/flaky-list", "/broken", "/gone", "/gone410", "/slow",
    "/private/x", "/loop", "/redirect", "/offsite", "/big", "/crash", "/forbidden",
]  # fmt: skip


class Site:
    """Each route misbehaves in one way; ``hits`` counts requests per path."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.times: dict[str, list[float]] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.offsite_url = ""
        self.db_path: str | None = None  # set: /host/ pages also note the crawl's leases
        self.max_leased = 0
        self.on_host: Callable[[], None] = lambda: None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.hits[path] += 1
        self.times.setdefault(path, []).append(time.monotonic())
        n = self.hits[path]
        page = "<html><body><span class='v'>{}</span>{}</body></html>"
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private\n")
        if path == "/start":
            links = "".join(f'<a href="{u}">x</a>' for u in [*LINKS, self.offsite_url])
            return web.Response(text=page.format("start", links), content_type="text/html")
        if path == "/ratelimited" and n == 1:
            return web.Response(status=429, headers={"Retry-After": "1"})
        if path == "/flaky-list":
            if n <= 2:
                return web.Response(status=503)
            return web.Response(
                text=page.format("list", '<a href="/ok/7">x</a>'), content_type="text/html"
            )
        if path == "/broken":
            return web.Response(status=500)
        if path == "/gone":
            return web.Response(status=404)
        if path == "/gone410":
            return web.Response(status=410)
        if path == "/slow" and n == 1:
            await asyncio.sleep(3)
        if path in ("/loop", "/loop2"):
            raise web.HTTPFound("/loop2" if path == "/loop" else "/loop")
        if path == "/redirect":
            raise web.HTTPFound("/ok/9")
        if path == "/offsite":
            raise web.HTTPFound(self.offsite_url)
        if path == "/big":
            return web.Response(body=b"x" * 50_000)
        if path == "/forbidden":
            return web.Response(status=403)
        if path.startswith("/host/"):
            self.on_host()
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.db_path:
                with contextlib.closing(sqlite3.connect(self.db_path)) as db:
                    query = "SELECT count(*) FROM frontier WHERE state = 'leased'"
                    self.max_leased = max(self.max_leased, db.execute(query).fetchone()[0])
            await asyncio.sleep(0.05)
            self.in_flight -= 1
        return web.Response(text=page.format(path, ""), content_type="text/html")


@pytest.fixture
def site() -> Iterator[tuple[Site, str]]:
    s = Site()
    with AppThread(s.app()) as thread:
        s.offsite_url = f"http://localhost:{thread.port}/ok/offsite"
        yield s, thread.url


class Probe(Spider):
    name = "probe"
    backoff_base = 0.05
    timeout = 1.0
    max_attempts = 3
    max_redirects = 3
    max_response_bytes = 10_000

    def parse(self, page: Page) -> Iterator[Any]:
        if page.url.endswith(("/start", "/flaky-list")):
            yield from page.follow_all(css="a::attr(href)")
        elif page.url.endswith("/crash"):
            raise ValueError("boom in user code")
        else:
            yield Record(key=page.url.split("/", 3)[3], data={"v": page.css(".v::text").get()})


def crawl(spider: Spider, store: Store, base: str, **settings: Any) -> Any:
    crawler = Crawler(
        spider,
        store,
        settings=type(spider).crawl_settings(**settings),
        start_urls=[f"{base}/start"],
        handle_signals=False,
    )
    return asyncio.run(crawler.run())


def test_engine_handles_every_kind_of_misbehaviour(site: tuple[Site, str], any_db_url: str) -> None:
    server, base = site
    store = open_store(any_db_url)
    try:
        result = crawl(Probe(), store, base)
        stats = result.stats
        records = {r.key: r for r in store.iter_records("probe")}
        failed = {f.url.removeprefix(base): f for f in store.failed("probe")}
    finally:
        store.close()
    hits = server.hits

    assert stats.pending == 0 and stats.leased == 0
    # 429 + Retry-After: retried after the server's delay, then stored
    assert hits["/ratelimited"] == 2
    gap = server.times["/ratelimited"][1] - server.times["/ratelimited"][0]
    assert gap >= 0.9
    assert "ratelimited" in records
    # a 503 on a listing page is retried, never taken as an empty page
    assert hits["/flaky-list"] == 3 and "ok/7" in records
    # 5xx for good: dead letter after max_attempts, with the last error
    assert hits["/broken"] == 3
    assert failed["/broken"].error == "HTTP 500 (gave up after 3 attempts)"
    assert failed["/broken"].attempts == 3
    # 404/410: done, no record, no retry
    assert hits["/gone"] == 1 and hits["/gone410"] == 1
    assert "gone" not in records and "/gone" not in failed
    # timeout: retried
    assert hits["/slow"] == 2 and "slow" in records
    # robots.txt obeyed, fetched once
    assert hits["/private/x"] == 0 and hits["/robots.txt"] == 1
    # redirect loop: fails, bounded
    assert "more than 3 redirects" in (failed["/loop"].error or "")
    assert hits["/loop"] + hits["/loop2"] <= 4
    # redirects followed; the record is stored under the final URL
    assert hits["/redirect"] == 1 and hits["/ok/9"] == 1
    assert records["ok/9"].url == f"{base}/ok/9"
    # off-site redirect and link: not followed; the link is counted (as Scrapy's
    # offsite/filtered), and said by `status`
    assert hits["/ok/offsite"] == 0 and "offsite" not in failed
    assert stats.links_offsite == 1 and stats.links_skipped == stats.links_cut == 0
    said = run_cli("status", "--db", any_db_url)
    assert "  links     1 outside the allow-list, not followed\n" in said.stdout, said.stderr
    # size cap
    assert "response too large" in (failed["/big"].error or "")
    # an exception in parse fails that URL with its traceback; the crawl goes on
    assert "ValueError: boom in user code" in (failed["/crash"].error or "")
    assert "Traceback" in (failed["/crash"].error or "")
    # other statuses fail, never silently done
    assert failed["/forbidden"].http_status == 403
    assert set(failed) == {"/broken", "/loop", "/big", "/crash", "/forbidden"}
    assert "ok/1" in records
    # the store's request count agrees with the server's (robots.txt aside)
    server_pages = sum(hits.values()) - hits["/robots.txt"]
    redirect_extra = hits["/loop2"] + hits["/ok/9"] + hits["/loop"] - 1
    assert stats.requests == server_pages - redirect_extra
    assert stats.retries == 1 + 2 + 2 + 1  # ratelimited, flaky-list, broken, slow


def test_robots_txt_is_cached_across_runs(site: tuple[Site, str], any_db_url: str) -> None:
    server, base = site
    for _ in range(2):
        store = open_store(any_db_url)
        try:
            crawl(Probe(), store, base)
            store.retry_failed("probe")
        finally:
            store.close()
    assert server.hits["/robots.txt"] == 1


class HostSpider(Spider):
    name = "hosts"

    def parse(self, page: Page) -> Iterator[Any]:
        if page.url.endswith("/start"):
            yield from (page.follow(f"/host/{i}") for i in range(20))


class DelayedHostSpider(HostSpider):
    name = "hosts-delayed"


def test_per_host_concurrency_and_delay(site: tuple[Site, str], any_db_url: str) -> None:
    server, base = site
    store = open_store(any_db_url)
    try:
        crawl(HostSpider(), store, base, concurrency=10, per_host_concurrency=2)
        assert server.max_in_flight == 2
        server.max_in_flight = 0
        crawl(DelayedHostSpider(), store, base, concurrency=10, per_host_delay=0.05)
    finally:
        store.close()
    starts = sorted(t for p, ts in server.times.items() if p.startswith("/host/") for t in ts)
    second_run = starts[20:]
    # 20 requests spaced by 0.05 s span at least 19 gaps (server-side clock, some jitter)
    assert second_run[-1] - second_run[0] >= 19 * 0.05 * 0.9


def test_per_host_limits_hold_for_several_workers_together(
    site: tuple[Site, str], any_db_url: str
) -> None:
    """Two crawlers on one frontier, each allowed 10 requests: per_host_concurrency 2
    is what the site sees from both together (the claim counts every worker's leases).
    The second starts once the first is fetching, when 10 URLs are still unleased."""
    server, base = site
    fetching = threading.Event()
    server.on_host = fetching.set
    stores = [open_store(any_db_url) for _ in range(2)]
    try:
        settings = HostSpider.crawl_settings(concurrency=10, per_host_concurrency=2)

        async def both() -> list[Any]:
            first, second = (
                Crawler(HostSpider(), s, settings=settings, start_urls=[f"{base}/start"],
                        handle_signals=False)
                for s in stores
            )  # fmt: skip
            running = asyncio.create_task(first.run())
            await asyncio.get_running_loop().run_in_executor(None, fetching.wait, 30)
            return [await second.run(), await running]

        results = asyncio.run(both())
    finally:
        for s in stores:
            s.close()
    assert server.max_in_flight == 2
    assert results[0].stats.done == 21 and server.hits["/start"] == 1
    assert sum(n for p, n in server.hits.items() if p.startswith("/host/")) == 20


@pytest.mark.parametrize("ahead", [0, 3])
def test_lease_ahead_holds_more_leases_but_no_more_requests(
    site: tuple[Site, str], db_url: str, ahead: int
) -> None:
    server, base = site
    server.db_path = db_url.removeprefix("sqlite:///")
    store = open_store(db_url)
    try:
        result = crawl(HostSpider(), store, base, concurrency=2, lease_ahead=ahead)
    finally:
        store.close()
    assert result.stats.done == 21 and result.stats.leased == 0
    assert server.max_in_flight == 2  # requests: never more than concurrency
    if ahead:
        assert 2 < server.max_leased <= 2 + ahead  # leases: up to concurrency + lease_ahead
    else:
        assert server.max_leased <= 2  # DESIGN's rule: a page holds its slot until commit


def test_a_stop_gives_back_the_leases_ahead_unfetched(site: tuple[Site, str], db_url: str) -> None:
    server, base = site
    store = open_store(db_url)
    crawler = Crawler(
        HostSpider(), store, settings=HostSpider.crawl_settings(concurrency=1, lease_ahead=4),
        start_urls=[f"{base}/start"], handle_signals=False,
    )  # fmt: skip

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        server.on_host = lambda: loop.call_soon_threadsafe(crawler.request_stop)
        return await crawler.run()

    try:
        result = asyncio.run(main())
        pending = store.stats("hosts").pending
    finally:
        store.close()
    assert result.interrupted
    fetched = sum(n for path, n in server.hits.items() if path.startswith("/host/"))
    assert fetched == 1  # the one request in flight; the 4 leased ahead were not started
    stats = result.stats
    assert stats.done == 2 and stats.leased == 0 and pending == 19
    assert stats.outcomes.get("released", 0) == 4  # given back, not left to lapse
    assert stats.repeated == 0 and stats.requests == 2


class BadYields(Spider):
    name = "bad"

    def parse(self, page: Page) -> Iterator[Any]:
        if page.url.endswith("/start"):
            yield page.follow("/ok/1")
            yield page.follow("/ok/2")
        elif page.url.endswith("/ok/1"):
            yield Record(key=None, data={})
        else:
            yield 42


def test_bad_yields_fail_the_page_with_a_clear_message(
    site: tuple[Site, str], any_db_url: str
) -> None:
    _, base = site
    store = open_store(any_db_url)
    try:
        crawl(BadYields(), store, base)
        errors = {f.url.removeprefix(base): f.error or "" for f in store.failed("bad")}
    finally:
        store.close()
    assert "empty key" in errors["/ok/1"]
    assert "parse yielded int" in errors["/ok/2"]


class ManyLinks(Spider):
    name = "many"

    def parse(self, page: Page) -> Iterator[Any]:
        if page.url.endswith("/start"):
            yield from (page.follow(f"/ok/{i}") for i in range(50))
        else:
            yield Record(key=page.url.rsplit("/", 1)[1], data={})


def test_a_stop_during_a_lease_gives_the_new_leases_back(
    site: tuple[Site, str], db_url: str
) -> None:
    """A stop that arrives while the store is granting leases must not start those pages
    after the drain has begun: they go back to pending, unfetched."""
    server, base = site
    store = open_store(db_url)
    crawler = Crawler(
        ManyLinks(), store, settings=ManyLinks.crawl_settings(concurrency=4),
        start_urls=[f"{base}/start"], handle_signals=False,
        store_process=False,  # the test wraps a method of this very store object
    )  # fmt: skip
    calls = 0
    original = store.commit_and_lease

    def stop_midway(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        result = original(*args, **kwargs)
        if calls == 3:
            crawler.request_stop()  # as if Ctrl-C came while this transaction ran
        return result

    store.commit_and_lease = stop_midway  # type: ignore[method-assign]
    try:
        result = asyncio.run(crawler.run())
        stats = store.stats("many")
    finally:
        store.close()
    assert result.interrupted
    assert stats.leased == 0  # nothing left leased: finished or given back
    fetched = sum(n for path, n in server.hits.items() if path.startswith("/ok/"))
    assert fetched == stats.done - 1  # every page fetched was committed (start page aside)
    assert stats.outcomes.get("released", 0) >= 1
    assert stats.repeated == 0


class CommitFaults:
    """Make ``store.commit_and_lease`` raise ``error`` on the calls ``fails(n)`` picks
    (n counts from 1); ``calls`` counts them all."""

    def __init__(self, store: Store, fails: Callable[[int], bool], error: Exception) -> None:
        self.calls = 0
        original = store.commit_and_lease

        def commit_and_lease(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if fails(self.calls):
                raise error
            return original(*args, **kwargs)

        store.commit_and_lease = commit_and_lease  # type: ignore[method-assign]


def test_a_page_whose_commit_raises_goes_back_to_the_queue(
    site: tuple[Site, str], db_url: str
) -> None:
    _, base = site
    store = open_store(db_url)
    CommitFaults(store, lambda call: call == 2, RuntimeError("disk hiccup"))
    try:
        crawler = Crawler(
            ManyLinks(), store, settings=ManyLinks.crawl_settings(concurrency=4, lease_seconds=60),
            start_urls=[f"{base}/start"], handle_signals=False,
            store_process=False,  # the test wraps a method of this very store object
        )  # fmt: skip
        started = time.monotonic()
        result = asyncio.run(crawler.run())
    finally:
        store.close()
    # The pages of the failed commit were released, not left to a 60 s lease.
    assert time.monotonic() - started < 30
    assert result.stats.records == 50 and result.stats.leased == 0


def test_a_store_that_keeps_failing_stops_the_crawl_with_its_error(
    site: tuple[Site, str], db_url: str
) -> None:
    _, base = site
    store = open_store(db_url)
    # The start page commits, then the disk fills.
    commits = CommitFaults(store, lambda call: call > 1, OSError("database or disk is full"))
    try:
        crawler = Crawler(
            ManyLinks(), store, settings=ManyLinks.crawl_settings(concurrency=4),
            start_urls=[f"{base}/start"], handle_signals=False, store_process=False,
        )  # fmt: skip
        with pytest.raises(StoreError, match=r"commits in a row failed.*disk is full"):
            asyncio.run(crawler.run())
        stats = store.stats("many")
    finally:
        store.close()
    # It stopped instead of retrying for ever: after the start page, the failures that
    # stop it, and at most one more commit for each of the 4 pages still in flight.
    assert commits.calls <= 1 + MAX_FAILED_COMMITS + 4
    assert stats.done == 1 and stats.leased == 0  # what was stored stays; nothing is stuck


def test_a_crawl_whose_store_process_dies_ends_with_a_clear_error(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    """The OOM killer may pick the store process: the crawl must stop with an error that
    says so, in bounded time, and keep what was committed before."""
    site = shop(listings=10, per_listing=20, latency_ms=20)
    store = open_store(db_url)
    crawler = Crawler(
        DemoShop(), store, settings=DemoShop.crawl_settings(concurrency=4),
        start_urls=[f"{site.url}/list/0"], handle_signals=False,
    )  # fmt: skip
    assert isinstance(crawler._db, StoreProcess)

    async def run() -> None:
        async def kill_the_store() -> None:
            while len(site.shop.counts) < 20:  # some pages fetched and committed
                await asyncio.sleep(0.01)
            assert crawler._db._proc is not None
            os.kill(crawler._db._proc.pid, signal.SIGKILL)

        killer = asyncio.create_task(kill_the_store())
        try:
            await crawler.run()
        finally:
            killer.cancel()

    started = time.monotonic()
    try:
        with pytest.raises(StoreError, match=r"ended unexpectedly \(killed by signal 9"):
            asyncio.run(run())
        assert time.monotonic() - started < 30
        stats = store.stats("demo-shop")
    finally:
        store.close()
    assert stats.done >= 10 and stats.records >= 5  # kept; the next run resumes from here
