"""Recrawls that cost only what changed (issue #29 item 1): validators kept with each page,
conditional requests in a recrawl, a 304 or an unchanged body not parsed and its records
kept; a changed spider parses everything again. On both backends."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

import crashsafe
from crashsafe import Page, Record, Spider, open_store
from crashsafe.demo.server import AppThread
from crashsafe.demo.shop import ShopThread, discontinued, product, sku
from crashsafe.demo.spider import DemoShop
from tests.helpers import exported, get_json, run_cli
from tests.integration.test_cli import crawl_args


def test_an_unchanged_shop_answers_304_for_every_page_and_keeps_every_record(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=4, per_listing=10)
    first = run_cli(*crawl_args(site, any_db_url))
    assert first.returncode == 0, first.stderr
    sent = get_json(f"{site.url}/stats")["bytes"]
    assert run_cli("recrawl", "--db", any_db_url).returncode == 0
    site.shop.counts.clear()
    second = run_cli(*crawl_args(site, any_db_url))
    assert second.returncode == 0, second.stderr
    stats = get_json(f"{site.url}/stats")
    assert stats["requests"] == 44 and stats["not_modified"] == 44  # every page: a 304
    assert stats["bytes"] == 0 < sent  # not one body sent again
    assert "this run: 44 requests, 0 new records, 0 changed\n" in second.stderr
    live = exported(any_db_url)
    assert len(live) == 40 and all(r["version"] == 1 for r in live)  # kept, none gone
    [status] = json.loads(run_cli("status", "--db", any_db_url, "--json").stdout)
    assert status["last_pass_fetches"] == {"not-modified": {"pages": 44, "bytes": 0}}
    assert status["effects"]["gone"] == 0
    compact = run_cli("status", "--db", any_db_url).stdout
    assert "revisits  44 pages fetched in the last pass: 44 not modified (304)" in compact


def test_a_crawl_run_at_another_pace_still_answers_304_but_another_depth_parses_again(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=2, per_listing=5)
    assert run_cli(*crawl_args(site, any_db_url)).returncode == 0
    assert run_cli("recrawl", "--db", any_db_url).returncode == 0
    site.shop.counts.clear()
    pace = ("--concurrency", "3", "-s", "lease_ahead=2", "-s", "per_host_delay=0.001",
            "-s", "max_attempts=3", "-s", "log_interval=5", "-s", "backoff_base=2")  # fmt: skip
    paced = run_cli(*crawl_args(site, any_db_url, *pace))
    assert paced.returncode == 0, paced.stderr
    stats = get_json(f"{site.url}/stats")
    assert stats["requests"] == 12 and stats["not_modified"] == 12  # pace decides no yield
    assert run_cli("recrawl", "--db", any_db_url).returncode == 0
    site.shop.counts.clear()
    deeper = run_cli(*crawl_args(site, any_db_url, "-s", "max_depth=50"))
    assert deeper.returncode == 0, deeper.stderr
    stats = get_json(f"{site.url}/stats")
    assert stats["requests"] == 12 and stats["not_modified"] == 0  # depth decides links


def test_the_settings_left_out_of_the_fingerprint_are_settings() -> None:
    from crashsafe.crawl.revisits import PACING, spider_fingerprint
    from crashsafe.crawl.settings import CrawlSettings

    assert {f.name for f in dataclasses.fields(CrawlSettings)} >= PACING
    spider = DemoShop()
    base = spider_fingerprint(spider, CrawlSettings())
    assert spider_fingerprint(spider, CrawlSettings(concurrency=3, lease_ahead=2)) == base
    # whether a download's robots.txt counts as unreachable decides what a record holds
    assert spider_fingerprint(spider, CrawlSettings(timeout=5)) != base
    assert spider_fingerprint(spider, CrawlSettings(robots_unreachable_grace=0)) != base


def test_a_repriced_shop_sends_and_parses_exactly_what_changed(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=5, per_listing=20)
    assert run_cli(*crawl_args(site, any_db_url)).returncode == 0
    site.shop.options = dataclasses.replace(site.shop.options, round=1)
    changed = {sku(n) for n in range(100) if product(n, 1) != product(n)}
    gone = {sku(n) for n in range(100) if discontinued(n, 1)}
    changed -= gone
    assert run_cli("recrawl", "--db", any_db_url).returncode == 0
    site.shop.counts.clear()
    second = run_cli(*crawl_args(site, any_db_url))
    assert second.returncode == 0, second.stderr
    assert (f"this run: 105 requests, 0 new records, {len(changed)} changed, {len(gone)} gone"
            in second.stderr)  # fmt: skip
    stats = get_json(f"{site.url}/stats")
    # 304 for every live product page that did not change; bodies for the rest
    unchanged_products = 100 - len(changed) - len(gone)
    assert stats["not_modified"] >= unchanged_products
    [status] = json.loads(run_cli("status", "--db", any_db_url, "--json").stdout)
    fetches = status["last_pass_fetches"]
    assert fetches["not-modified"]["pages"] == stats["not_modified"]
    assert sum(f["bytes"] for f in fetches.values()) == stats["bytes"]


class Plain:
    """A site that ignores validators: the same bodies every time, no ETag."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text="")
        if request.path == "/":
            links = "".join(f'<a href="/p/{n}">{n}</a>' for n in range(5))
            return web.Response(text=f"<html>{links}</html>", content_type="text/html")
        n = request.path.rsplit("/", 1)[1]
        return web.Response(text=f"<html><b>{n}</b></html>", content_type="text/html")


class Counted(Spider):
    name = "plain"
    parsed: Counter[str] = Counter()

    def parse(self, page: Page) -> Iterator[Any]:
        type(self).parsed[page.url] += 1
        yield from page.follow_all(css="a::attr(href)")
        if "/p/" in page.url:
            yield Record(page.url.rsplit("/", 1)[1], {"b": page.css("b::text").get()})


class CountedToo(Counted):
    """The same crawl with another spider: every page is parsed again."""

    parsed: Counter[str] = Counter()


def test_a_server_that_ignores_validators_is_not_parsed_again_if_its_pages_did_not_change(
    any_db_url: str,
) -> None:
    site = Plain()
    Counted.parsed.clear()
    CountedToo.parsed.clear()
    with AppThread(site.app()) as served:
        crashsafe.crawl(Counted, db=any_db_url, start_urls=[f"{served.url}/"])
        assert sum(Counted.parsed.values()) == 6
        store = open_store(any_db_url)
        try:
            store.recrawl("plain")
        finally:
            store.close()
        crashsafe.crawl(Counted, db=any_db_url, start_urls=[f"{served.url}/"])
        assert sum(Counted.parsed.values()) == 6  # fetched again, the same: not parsed
        assert all(n == 2 for path, n in site.hits.items() if path != "/robots.txt")
        store = open_store(any_db_url)
        try:
            records = {r.key: (r.version, r.gone_at) for r in store.iter_records("plain")}
            revisits = store.pass_revisits("plain")
            store.recrawl("plain")
        finally:
            store.close()
        assert records == {str(n): (1, None) for n in range(5)}  # kept, not gone
        assert revisits["unchanged"][0] == 6
        # Another spider for the same crawl: its output may differ, every page is parsed
        crashsafe.crawl(CountedToo, db=any_db_url, start_urls=[f"{served.url}/"])
        assert sum(CountedToo.parsed.values()) == 6


def test_a_first_crawl_keeps_validators_for_every_page(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=1, per_listing=3)
    crashsafe.crawl(DemoShop, db=db_url, start_urls=[f"{site.url}/list/0"])
    store = open_store(db_url)
    try:
        ids = list(range(1, 10))
        kept = [json.loads(v) for v in store.validators("demo-shop", ids).values()]
    finally:
        store.close()
    assert len(kept) == 4  # a listing and 3 products
    assert all(k["etag"].startswith('"') and k["last_modified"].endswith("GMT") for k in kept)
    assert all(len(k["sha256"]) == 32 and k["spider"] for k in kept)


class Listing:
    """One page listing items, which a test can change."""

    def __init__(self) -> None:
        self.items = ["a", "b"]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="")
        body = "".join(f"<i>{item}</i>" for item in self.items)
        return web.Response(text=f"<html>{body}</html>", content_type="text/html")


class Items(Spider):
    name = "items"

    def parse(self, page: Page) -> Iterator[Any]:
        for item in page.css("i::text").getall():
            yield Record(item, {"item": item})


def test_records_of_a_page_found_unchanged_stay_until_a_parse_drops_them(
    any_db_url: str,
) -> None:
    site = Listing()

    def live() -> dict[str, int]:
        store = open_store(any_db_url)
        try:
            return {r.key: r.version for r in store.iter_records("items")}
        finally:
            store.close()

    def next_pass() -> None:
        _next_pass(any_db_url, "items")
        crashsafe.crawl(Items, db=any_db_url, start_urls=[f"{served.url}/"])

    with AppThread(site.app()) as served:
        crashsafe.crawl(Items, db=any_db_url, start_urls=[f"{served.url}/"])
        assert live() == {"a": 1, "b": 1}
        next_pass()  # the same body: not parsed, nothing gone
        assert live() == {"a": 1, "b": 1}
        next_pass()  # and again
        assert live() == {"a": 1, "b": 1}
        site.items = ["a"]
        next_pass()  # changed: parsed, and b is gone
        assert live() == {"a": 1}


class Scripted:
    """Pages a test rewrites between passes: ``pages[path] = (status, html, headers)``;
    validators as a real server sends them (a strong ETag from the body, Last-Modified
    from ``modified[path]``), 304 when ``If-None-Match`` matches, or without it when the
    page is not newer than ``If-Modified-Since``."""

    def __init__(self) -> None:
        self.pages: dict[str, tuple[int, str, dict[str, str]]] = {}
        self.modified: dict[str, int] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        import hashlib
        from email.utils import formatdate, parsedate_to_datetime

        if request.path == "/robots.txt":
            return web.Response(text="")
        status, html, extra = self.pages.get(request.path, (404, "", {}))
        if status != 200:
            return web.Response(status=status, text=html, headers=extra)
        etag = '"' + hashlib.sha256(html.encode()).hexdigest()[:12] + '"'
        stamp = 1_700_000_000 + self.modified.get(request.path, 0)
        headers = {"ETag": etag, "Last-Modified": formatdate(stamp, usegmt=True), **extra}
        match, since = (
            request.headers.get("If-None-Match"),
            request.headers.get("If-Modified-Since"),
        )
        if match == etag or (
            match is None and since and stamp <= parsedate_to_datetime(since).timestamp()
        ):
            return web.Response(status=304, headers=headers)
        return web.Response(text=html, content_type="text/html", headers=headers)


class Listed(Spider):
    name = "listed"
    currency = "USD"

    def parse(self, page: Page) -> Iterator[Any]:
        yield from page.follow_all(css="a::attr(href)")
        for item in page.css("i::text").getall():
            yield Record(item, {"item": item, "currency": self.currency})


def _live(db: str, crawl: str) -> dict[str, Any]:
    store = open_store(db)
    try:
        return {r.key: r.data for r in store.iter_records(crawl)}
    finally:
        store.close()


def _next_pass(db: str, crawl: str) -> None:
    store = open_store(db)
    try:
        store.recrawl(crawl)
    finally:
        store.close()


def test_a_page_gone_then_back_as_it_was_is_parsed_again(any_db_url: str) -> None:
    """404 in one pass (its records gone), the same body as before in the next: its
    records come back (the 404 kept no validators to answer with)."""
    site = Scripted()
    site.pages["/"] = (200, "<i>a</i><i>b</i>", {})
    with AppThread(site.app()) as served:
        start = [f"{served.url}/"]
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start)
        site.pages["/"] = (404, "", {})
        _next_pass(any_db_url, "listed")
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start)
        assert _live(any_db_url, "listed") == {}
        site.pages["/"] = (200, "<i>a</i><i>b</i>", {})
        _next_pass(any_db_url, "listed")
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start)
        assert set(_live(any_db_url, "listed")) == {"a", "b"}


def test_a_record_another_page_dropped_stays_while_an_unchanged_page_lists_it(
    any_db_url: str,
) -> None:
    site = Scripted()
    site.pages["/"] = (200, '<a href="/a">a</a><a href="/b">b</a>', {})
    site.pages["/a"] = (200, "<i>x</i>", {})
    site.pages["/b"] = (200, "<i>x</i><i>y</i>", {})
    with AppThread(site.app()) as served:
        start = [f"{served.url}/"]
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start, concurrency=1)
        site.pages["/b"] = (200, "<i>y</i>", {})  # /b drops x; /a, unchanged, still has it
        _next_pass(any_db_url, "listed")
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start, concurrency=1)
        assert set(_live(any_db_url, "listed")) == {"x", "y"}


def test_a_page_that_now_redirects_is_not_taken_as_unchanged(any_db_url: str) -> None:
    site = Scripted()
    site.pages["/"] = (200, '<a href="/p/1">1</a>', {})
    site.pages["/p/1"] = (200, "<i>p1</i>", {})
    site.modified["/p/1"] = 100  # newer than the listing
    with AppThread(site.app()) as served:
        start = [f"{served.url}/"]
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start)
        assert set(_live(any_db_url, "listed")) == {"p1"}
        site.pages["/p/1"] = (301, "", {"Location": "/"})  # removed: sent to the listing
        _next_pass(any_db_url, "listed")
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start)
        assert _live(any_db_url, "listed") == {}  # p1 is gone, not kept by a 304 of "/"


def test_a_spider_argument_changed_parses_every_page_again(any_db_url: str) -> None:
    site = Scripted()
    site.pages["/"] = (200, "<i>a</i>", {})
    with AppThread(site.app()) as served:
        start = [f"{served.url}/"]
        crashsafe.crawl(Listed, db=any_db_url, start_urls=start)
        _next_pass(any_db_url, "listed")
        crashsafe.crawl(Listed(currency="EUR"), db=any_db_url, start_urls=start)
        assert _live(any_db_url, "listed") == {"a": {"item": "a", "currency": "EUR"}}
        _next_pass(any_db_url, "listed")  # the same arguments again: a 304, kept as is
        crashsafe.crawl(Listed(currency="EUR"), db=any_db_url, start_urls=start)
        store = open_store(any_db_url)
        try:
            assert store.pass_revisits("listed") == {"not-modified": (1, 0)}
        finally:
            store.close()
        assert _live(any_db_url, "listed") == {"a": {"item": "a", "currency": "EUR"}}
