"""Every hostile input costs bounded work: at most ``max_attempts`` fetches per URL, never
faster than the backoff, and one bad page never fails another (DESIGN rule 5)."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from crashsafe import Crawler, Link, Page, Record, Spider, open_store
from crashsafe.errors import ConfigError
from crashsafe.store import Store
from tests.faults.conftest import TIME_LIMIT, run_crawl
from tests.faults.hostile import BAD_LINKS, HostileSite, hostile_site

MAX_ATTEMPTS = 3
BASE_EXCEPTIONS: dict[str, type[BaseException]] = {
    "/system-exit": SystemExit,
    "/keyboard-interrupt": KeyboardInterrupt,
    "/generator-exit": GeneratorExit,
}
BACKOFF = 0.05  # backoff_base: the n-th retry waits 0.05 * 2**(n-1) * [0.5, 1.5)
BACKOFF_MAX = 0.5


class Hostile(Spider):
    name = "hostile"
    backoff_base = BACKOFF
    backoff_max = BACKOFF_MAX
    timeout = 1.0
    max_attempts = MAX_ATTEMPTS
    max_redirects = 3
    max_response_bytes = 100_000

    def parse(self, page: Page) -> Iterator[Any]:
        path = urlsplit(page.url).path
        if path == "/start":
            yield from page.follow_all(css="a::attr(href)")
        elif path == "/surrogate":
            raise ValueError("odd bytes \udc80 in here")
        elif path == "/surrogate-key":
            yield Record("key-\udc80", {"t": "text-\udc81"})
        elif path == "/odd-links":  # each skipped and counted; the record still stored
            yield Record("odd-links", {"v": 1})
            yield Link(5)  # type: ignore[arg-type]
            yield Link(None)  # type: ignore[arg-type]
            yield Link(page.url + "/a", callback="not a name \udc80")
            yield Link(page.url + "/b", priority=2**70)
            yield Link(page.url + "/c", priority=math.nan)  # type: ignore[arg-type]
            yield Link(page.url + "/d", priority=None)  # type: ignore[arg-type]
            yield page.follow("/ok?by-method", callback=self.parse)  # stored by name
        elif path in BASE_EXCEPTIONS:
            raise BASE_EXCEPTIONS[path]("from a spider")
        elif path == "/nan":
            yield Record("nan", {"price": math.nan})
        elif path == "/dup":
            yield Record("dup", {"v": 1})
            yield Record("dup", {"v": 2})  # the same key twice: the last one wins
        elif path == "/with-bad-link":
            yield Record("with-bad-link", {"v": page.css(".v::text").get()})
            yield page.follow("http://[::1")
            yield "http://127.0.0.1:99999/x"
        else:
            yield Record(path, {"v": page.css(".v::text").get()})


def crawl(store: Store, start: str, **settings: Any) -> Any:
    return run_crawl(Hostile(), store, start, **settings)


def gaps(site: HostileSite, path: str) -> list[float]:
    times = site.times[path]
    return [b - a for a, b in itertools.pairwise(times)]


def test_each_hostile_url_costs_at_most_max_attempts_fetches(store: Store) -> None:
    with hostile_site() as (site, base):
        result = crawl(store, f"{base}/start")
    stats = result.stats
    failed = {urlsplit(f.url).path: f for f in store.failed("hostile")}
    records = {r.key: r for r in store.iter_records("hostile")}

    # the crawl ends: nothing left pending or leased, nothing fetched more than allowed
    assert stats.pending == 0 and stats.leased == 0
    fetched = {path: n for path, n in site.hits.items() if path != "/redirect-loop"}
    assert max(fetched.values()) <= MAX_ATTEMPTS  # (the loop's hits are its redirects)
    # a redirect to a URL that cannot be parsed fails at once, naming the target
    assert site.hits["/bad-redirect"] == 1
    assert "cannot be parsed: 'http://[::1'" in (failed["/bad-redirect"].error or "")
    # a redirect loop fails after max_redirects
    assert site.hits["/redirect-loop"] == 4  # the request and 3 redirects followed
    assert "more than 3 redirects" in (failed["/redirect-loop"].error or "")
    # bodies over the cap, declared or endless, fail at once
    for path in ("/huge-declared", "/endless-chunked"):
        assert site.hits[path] == 1
        assert "response too large" in (failed[path].error or "")
    # a body that trickles times out: retried with backoff, then given up
    assert site.hits["/slow-body"] == MAX_ATTEMPTS
    assert "timeout" in (failed["/slow-body"].error or "")
    # Retry-After: a huge one is capped at backoff_max, a garbage one means the backoff
    assert site.hits["/retry-after-long"] == MAX_ATTEMPTS
    assert all(g >= BACKOFF_MAX * 0.9 for g in gaps(site, "/retry-after-long"))
    assert site.hits["/retry-after-garbage"] == MAX_ATTEMPTS
    floors = [BACKOFF * 2**n * 0.5 for n in range(MAX_ATTEMPTS)]
    assert all(
        g >= f * 0.9 for g, f in zip(gaps(site, "/retry-after-garbage"), floors, strict=False)
    )
    # an exception whose text UTF-8 cannot carry fails its own page, stored escaped
    assert site.hits["/surrogate"] == 1
    assert "odd bytes \\udc80 in here" in (failed["/surrogate"].error or "")
    # a record whose key and data UTF-8 cannot carry: stored, and read back exactly
    assert records["key-\udc80"].data == {"t": "text-\udc81"}
    # NaN in a record: the page fails with the reason
    assert "NaN or Infinity" in (failed["/nan"].error or "")
    # one key yielded twice by a page: one row, at version 1, the last one
    assert records["dup"].version == 1 and records["dup"].data == {"v": 2}
    # a malformed link never fails its page: the record is stored, the links counted
    assert records["with-bad-link"].data == {"v": "/with-bad-link"}
    assert stats.links_skipped == len(BAD_LINKS) + 2 + 6
    assert records["odd-links"].data == {"v": 1} and site.hits["/ok"] == 2  # + ?by-method
    # SystemExit, KeyboardInterrupt, GeneratorExit from parse fail their page, nothing more
    for path, exc in BASE_EXCEPTIONS.items():
        assert site.hits[path] == 1 and f"{exc.__name__}: from a spider" in (
            failed[path].error or ""
        )
    assert "/ok" in records
    expected_failures = {
        "/bad-redirect", "/redirect-loop", "/huge-declared", "/endless-chunked",
        "/slow-body", "/retry-after-long", "/retry-after-garbage", "/surrogate", "/nan",
        *BASE_EXCEPTIONS,
    }  # fmt: skip
    assert set(failed) == expected_failures
    assert stats.done == 1 + 17 + 1 - len(
        expected_failures
    )  # start, the pages, ?by-method  # /start and the pages that worked


def test_the_crawl_of_a_page_with_bad_links_finishes_on_a_rerun_too(store: Store) -> None:
    with hostile_site() as (site, base):
        crawl(store, f"{base}/with-bad-link")
        again = crawl(store, f"{base}/with-bad-link")
    assert site.hits["/with-bad-link"] == 1
    assert again.stats.done == 1 and again.stats.links_skipped == 2


@pytest.mark.parametrize("start", ["http://127.0.0.1:99999/", "http://[::1", "ftp://127.0.0.1/"])
def test_a_start_url_that_cannot_be_crawled_is_a_clear_error(store: Store, start: str) -> None:
    with pytest.raises(ConfigError, match="cannot be crawled"):
        crawl(store, start)
    assert store.crawls() == []


# -- robots.txt (RFC 9309) ----------------------------------------------------------------


def test_a_robots_txt_redirect_loop_counts_as_unavailable(store: Store) -> None:
    with hostile_site("loop") as (site, base):
        crawl(store, f"{base}/ok")
    robots = sum(n for path, n in site.hits.items() if path.startswith("/robots"))
    assert robots == 6  # the request and 5 redirects (RFC 9309 2.3.1.2), once
    assert site.hits["/ok"] == 1  # unavailable means no rules


def test_a_huge_robots_txt_is_read_up_to_500_kib(store: Store) -> None:
    with hostile_site("huge") as (site, base):
        crawl(store, f"{base}/ok")
        # the crawl is done; crawling two more pages of it reads robots.txt from the store
        crawl(store, f"{base}/private")
        crawl(store, f"{base}/late")
    assert site.hits["/robots.txt"] == 1  # cached for the next runs
    assert site.hits["/ok"] == 1
    assert site.hits["/private"] == 0  # a rule within the first 500 KiB is obeyed
    assert site.hits["/late"] == 1  # one past it is not read


@pytest.mark.parametrize("mode", ["503", "reset"])
def test_an_unreachable_robots_txt_holds_its_pages_back_with_backoff(
    store: Store, mode: str
) -> None:
    grace = 1.5
    with hostile_site(mode) as (site, base):
        result = crawl(store, f"{base}/ok", robots_unreachable_grace=grace, backoff_base=0.2)
    first_robots = site.times["/robots.txt"][0]
    # the page waits (not fetched, not failed, no attempt counted) until robots.txt has
    # been unreachable for the grace period; then it is crawled with no rules
    assert site.hits["/ok"] == 1
    assert site.times["/ok"][0] - first_robots >= grace
    assert result.stats.done == 1 and result.stats.failed == 0
    assert result.stats.outcomes.get("deferred", 0) >= 1
    # robots.txt itself is tried with backoff, not hammered: 0.2 * 2**(n-1) * [0.5, 1.5)
    # (aiohttp itself sends a request again at once when a connection drops: up to two
    # requests per fetch, hence no gaps asserted for "reset")
    if mode == "reset":
        assert 2 <= site.hits["/robots.txt"] <= 12
    else:
        assert 2 <= site.hits["/robots.txt"] <= 6
        assert all(g >= 0.2 * 0.5 * 0.9 for g in gaps(site, "/robots.txt"))


def test_two_workers_fetch_a_robots_txt_once(db_url: str) -> None:
    async def two_workers(base: str) -> None:
        stores = [open_store(db_url), open_store(db_url)]
        try:
            crawlers = [
                Crawler(
                    Hostile(),
                    store,
                    # one page at a time each, two start pages: both workers need the
                    # origin's (slow) robots.txt at the same moment
                    settings=Hostile.crawl_settings(
                        # (the request waits as long as the test may: robots.txt is
                        # held until both workers hold a page, seconds on a busy machine)
                        concurrency=1,
                        user_agent=f"w{n}",
                        timeout=float(TIME_LIMIT),
                    ),
                    start_urls=[f"{base}/ok", f"{base}/dup"],
                    handle_signals=False,
                )
                for n, store in enumerate(stores)
            ]
            runs = asyncio.gather(*(c.run() for c in crawlers))
            await asyncio.wait_for(asyncio.gather(runs, both_need_robots()), TIME_LIMIT)
        finally:
            for store in stores:
                store.close()

    async def both_need_robots() -> None:
        """Let robots.txt answer once each worker holds a page (each needs the rules):
        a fixed delay let one worker take both pages when the other was slow to start."""
        watch = open_store(db_url)
        try:
            for _ in range(int(TIME_LIMIT / 0.05)):
                if watch.stats(Hostile.name).leased >= 2:
                    break
                await asyncio.sleep(0.05)
        finally:
            watch.close()
            site.robots_gate.set()

    with hostile_site("slow") as (site, base):
        asyncio.run(two_workers(base))
    assert set(site.agents) == {"w0", "w1"}  # both crawled...
    assert site.hits["/robots.txt"] == 1  # ...and one of them read robots.txt for both
    assert site.hits["/ok"] == 1 and site.hits["/dup"] == 1
