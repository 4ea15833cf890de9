"""Scrapy habits, through the Python API on sites of the test's own: dict items, requests
not filtered, proxies, basic auth, sitemaps, default headers."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import crashsafe
from crashsafe import Record, Request, Spider, open_store
from crashsafe.demo.server import AppThread
from crashsafe.errors import ConfigError, SpiderError, StoreError

Handler = Callable[[web.Request], Any]


@pytest.fixture
def site() -> Iterator[Callable[[dict[str, Handler]], AppThread]]:
    """Serve ``{path: handler}`` on 127.0.0.1; every request is noted in ``.seen``."""
    started: list[AppThread] = []

    def serve(routes: dict[str, Handler]) -> AppThread:
        seen: list[web.Request] = []

        async def handle(request: web.Request) -> web.StreamResponse:
            await request.read()
            seen.append(request)
            handler = routes.get(request.path)
            if handler is None:
                raise web.HTTPNotFound()
            result = handler(request)
            if asyncio.iscoroutine(result):
                result = await result
            if isinstance(result, web.StreamResponse):
                return result
            return web.Response(text=str(result), content_type="text/html")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        thread = AppThread(app)
        thread.__enter__()
        thread.seen = seen  # type: ignore[attr-defined]
        started.append(thread)
        return thread

    yield serve
    for thread in started:
        thread.__exit__(None, None, None)


def records(db: str, crawl: str) -> dict[str, Any]:
    store = open_store(db, create=False, readonly=True)
    try:
        return {r.key: r.data for r in store.iter_records(crawl)}
    finally:
        store.close()


def test_dicts_and_dataclasses_are_items_keyed_by_item_key(site: Any, db_url: str) -> None:
    @dataclass
    class Thing:
        sku: str
        price: str

    s = site({"/": lambda r: "<p>hi</p>"})

    class Items(Spider):
        name = "items"
        start_urls = [f"{s.url}/"]
        item_key = "sku"

        def parse(self, page: Any) -> Any:
            yield {"sku": "A1", "price": "1.00"}
            yield Thing(sku="B2", price="2.00")

    crashsafe.crawl(Items, db=db_url)
    assert records(db_url, "items") == {
        "A1": {"sku": "A1", "price": "1.00"},
        "B2": {"sku": "B2", "price": "2.00"},
    }


def test_item_key_may_be_a_function(site: Any, db_url: str) -> None:
    s = site({"/": lambda r: "<p>hi</p>"})

    class Items(Spider):
        name = "keyed"
        start_urls = [f"{s.url}/"]

        def item_key(self, item: dict[str, Any]) -> str:
            return f"{item['shop']}/{item['id']}"

        def parse(self, page: Any) -> Any:
            yield {"shop": "s", "id": 7}

    crashsafe.crawl(Items, db=db_url)
    assert list(records(db_url, "keyed")) == ["s/7"]


def test_a_dict_without_item_key_stops_the_crawl_at_once_saying_what_to_do(
    site: Any, db_url: str
) -> None:
    s = site({f"/{i}": (lambda r: "<p>x</p>") for i in range(30)})

    class Dicts(Spider):
        name = "dicts"
        start_urls = [f"{s.url}/0"]

        def parse(self, page: Any) -> Any:
            yield from page.follow_all([f"/{i}" for i in range(1, 30)])
            yield {"sku": page.url}

    with pytest.raises(SpiderError, match="item_key = 'sku'"):
        crashsafe.crawl(Dicts, db=db_url, concurrency=1)
    # 29 pages were left: the crawl stopped instead of failing them all.
    assert len(s.seen) <= 3  # robots.txt, /0, at most one page in flight


def test_dont_filter_fetches_a_seen_url_again_once_per_page_that_asks(
    site: Any, db_url: str
) -> None:
    s = site({
        "/a": lambda r: "a", "/b": lambda r: "b", "/c": lambda r: "<p>c</p>",
    })  # fmt: skip

    class Again(Spider):
        name = "again"
        start_urls = [f"{s.url}/a", f"{s.url}/b"]

        def parse(self, page: Any) -> Any:
            yield page.follow("/c", callback=self.parse_c)  # filtered: once in all
            yield page.follow("/c", callback=self.parse_c, dont_filter=True)
            yield page.follow("/c", callback=self.parse_c, dont_filter=True)

        def parse_c(self, page: Any) -> Any:
            return []

    crashsafe.crawl(Again, db=db_url)
    crashsafe.crawl(Again, db=db_url)  # run again: nothing is added twice
    assert sum(r.path == "/c" for r in s.seen) == 1 + 2 * 2


def test_meta_cb_kwargs_and_post_bodies_reach_the_callback(site: Any, db_url: str) -> None:
    async def echo(request: web.Request) -> str:
        return (await request.text()) or "empty"

    s = site({"/start": lambda r: "<p>start</p>", "/api": echo})

    class Posts(Spider):
        name = "posts"
        start_urls = [f"{s.url}/start"]

        def parse(self, page: Any) -> Any:
            for n in (1, 2):
                yield Request(
                    page.urljoin("/api"),
                    method="POST",
                    body=f"q={n}",
                    callback=self.parse_api,
                    meta={"n": n},
                    cb_kwargs={"label": f"L{n}"},
                )

        def parse_api(self, page: Any, label: str) -> Any:
            yield Record(key=label, data={"body": page.text, "n": page.meta["n"]})

    crashsafe.crawl(Posts, db=db_url)
    assert records(db_url, "posts") == {
        "L1": {"body": "q=1", "n": 1},
        "L2": {"body": "q=2", "n": 2},
    }
    assert [r.method for r in s.seen if r.path == "/api"] == ["POST", "POST"]


def test_default_headers_and_per_request_headers(site: Any, db_url: str) -> None:
    s = site({"/": lambda r: "<p>x</p>", "/h": lambda r: "<p>h</p>"})

    class Headers(Spider):
        name = "headers"
        start_urls = [f"{s.url}/"]
        default_headers = {"Accept-Language": "fr", "X-Both": "default"}

        def parse(self, page: Any) -> Any:
            if page.url.endswith("/"):
                yield page.follow("/h", headers={"X-Both": "request"})

    crashsafe.crawl(Headers, db=db_url)
    [h] = [r for r in s.seen if r.path == "/h"]
    assert h.headers["Accept-Language"] == "fr"
    assert h.headers["X-Both"] == "request"


@pytest.fixture
def proxy() -> Iterator[AppThread]:
    """A stand-in proxy: it answers every request itself, noting the URL it was asked
    for (a forward proxy is asked for absolute URLs)."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(str(request.url))
        return web.Response(text="<p class=via>proxy</p>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    thread = AppThread(app)
    thread.__enter__()
    thread.seen = seen  # type: ignore[attr-defined]
    yield thread
    thread.__exit__(None, None, None)


def via_spider(start: str, **attrs: Any) -> type[Spider]:
    class Via(Spider):
        name = "via"
        start_urls = [start]
        obey_robots = False

        def parse(self, page: Any) -> Any:
            yield Record(key="page", data={"via": page.css(".via::text").get()})

    for name, value in attrs.items():
        setattr(Via, name, value)
    return Via


def test_the_proxy_setting_sends_requests_through_it(site: Any, proxy: Any, db_url: str) -> None:
    s = site({"/": lambda r: "<p class=via>direct</p>"})
    crashsafe.crawl(via_spider(f"{s.url}/", proxy=proxy.url), db=db_url)
    assert records(db_url, "via") == {"page": {"via": "proxy"}}
    assert proxy.seen == [f"{s.url}/"]
    assert not s.seen


def test_meta_proxy_sends_one_request_through_it(site: Any, proxy: Any, db_url: str) -> None:
    s = site({"/": lambda r: "<p class=via>direct</p>"})

    class Meta(Spider):
        name = "via"
        start_urls: list[str] = []
        obey_robots = False

        allowed_addresses = ["loopback"]  # a meta proxy on another port is checked (#24)

        def start_requests(self) -> Any:
            return [Request(f"{s.url}/", meta={"proxy": proxy.url})]

        def parse(self, page: Any) -> Any:
            yield Record(key="page", data={"via": page.css(".via::text").get()})

    crashsafe.crawl(Meta, db=db_url)
    assert records(db_url, "via") == {"page": {"via": "proxy"}}


def test_proxies_from_the_environment_and_no_proxy(
    site: Any, proxy: Any, db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site({"/": lambda r: "<p class=via>direct</p>"})
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    crashsafe.crawl(via_spider(f"{s.url}/"), db=db_url)
    assert records(db_url, "via") == {"page": {"via": "proxy"}}
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    crashsafe.crawl(via_spider(f"{s.url}/"), db=other)
    assert records(other, "via") == {"page": {"via": "direct"}}


def test_basic_auth_goes_to_the_start_hosts_only(site: Any, db_url: str) -> None:
    other = site({"/elsewhere": lambda r: "<p>elsewhere</p>"})
    elsewhere = other.url.replace("127.0.0.1", "localhost") + "/elsewhere"

    def private(request: web.Request) -> str:
        if request.headers.get("Authorization") != "Basic dXNlcjpwdw==":  # user:pw
            raise web.HTTPUnauthorized()
        return f"<a href='{elsewhere}'>x</a>"

    s = site({"/private": private})

    class Auth(Spider):
        name = "auth"
        start_urls = [f"{s.url}/private"]
        http_user, http_pass = "user", "pw"
        allowed_domains = [s.url.removeprefix("http://"), elsewhere.split("/")[2]]
        allowed_addresses = ["loopback"]

        def parse(self, page: Any) -> Any:
            yield from page.follow_all(css="a::attr(href)")
            yield Record(key=page.url, data={})

    crashsafe.crawl(Auth, db=db_url, obey_robots=False)
    assert len(records(db_url, "auth")) == 2
    [away] = other.seen
    assert "Authorization" not in away.headers


def sitemap_xml(kind: str, entries: list[tuple[str, str]]) -> bytes:
    tag = "sitemap" if kind == "sitemapindex" else "url"
    body = "".join(
        f"<{tag}><loc>{loc}</loc><lastmod>{mod}</lastmod></{tag}>" for loc, mod in entries
    )
    ns = "http://www.sitemaps.org/schemas/sitemap/0.9"
    return f'<?xml version="1.0"?><{kind} xmlns="{ns}">{body}</{kind}>'.encode()


def test_sitemaps_index_gzip_robots_rules_follow_and_filter(site: Any, db_url: str) -> None:
    base: list[str] = []

    def xml(body: bytes) -> web.Response:
        return web.Response(body=body, content_type="application/xml")

    def robots(r: web.Request) -> str:
        return f"User-agent: *\nSitemap: {base[0]}/index.xml\n"

    def index(r: web.Request) -> web.Response:
        return xml(sitemap_xml("sitemapindex", [
            (f"{base[0]}/products.xml.gz", "2026-11-01"), (f"{base[0]}/skip.xml", "2026-11-01"),
        ]))  # fmt: skip

    def products(r: web.Request) -> web.Response:
        body = sitemap_xml("urlset", [
            (f"{base[0]}/p/1", "2026-11-20"), (f"{base[0]}/p/2", "2020-01-01"),
            (f"{base[0]}/blog/1", "2026-11-20"), (f"{base[0]}/other", "2026-11-20"),
        ])  # fmt: skip
        return web.Response(body=gzip.compress(body), content_type="application/gzip")

    s = site({
        "/robots.txt": robots, "/index.xml": index, "/products.xml.gz": products,
        "/skip.xml": lambda r: xml(sitemap_xml("urlset", [(f"{base[0]}/p/9", "2026-11-20")])),
        "/p/1": lambda r: "<h1>p1</h1>", "/p/2": lambda r: "<h1>p2</h1>",
        "/blog/1": lambda r: "<h1>b1</h1>", "/other": lambda r: "<h1>o</h1>",
    })  # fmt: skip
    base.append(s.url)

    class Maps(Spider):
        name = "maps"
        sitemap_urls = [f"{s.url}/robots.txt"]
        sitemap_rules = [("/p/", "parse_product"), ("/blog/", "parse_blog")]
        sitemap_follow = ["/products"]

        def sitemap_filter(self, entries: Any) -> Any:
            from crashsafe.crawl.sitemaps import lastmod_time

            cutoff = lastmod_time("2026-01-01")
            return [e for e in entries if (lastmod_time(e.lastmod) or 0) >= (cutoff or 0)]

        def parse_product(self, page: Any) -> Any:
            yield Record(key=page.url.rsplit("/", 1)[1], data={"kind": "product"})

        def parse_blog(self, page: Any) -> Any:
            yield Record(key="blog" + page.url.rsplit("/", 1)[1], data={"kind": "blog"})

    crashsafe.crawl(Maps, db=db_url)
    assert records(db_url, "maps") == {"1": {"kind": "product"}, "blog1": {"kind": "blog"}}
    paths = {r.path for r in s.seen}
    assert "/skip.xml" not in paths  # not followed
    assert "/p/2" not in paths  # filtered out by lastmod
    assert "/other" not in paths  # no rule


def test_a_sitemap_bomb_is_one_line_in_the_dead_letter(site: Any, db_url: str) -> None:
    # (#24 item 5: refused, but stored as a full traceback)
    from tests.unit.test_sitemaps import gzip_of_zeros

    bomb = gzip_of_zeros(60)
    gz = "application/gzip"
    s = site({"/sitemap.xml.gz": lambda r: web.Response(body=bomb, content_type=gz)})

    class Bombed(Spider):
        name = "bombed"
        sitemap_urls = [f"{s.url}/sitemap.xml.gz"]
        max_attempts = 1

    crashsafe.crawl(Bombed, db=db_url)
    store = crashsafe.open_store(db_url)
    try:
        [dead] = store.failed("bombed")
    finally:
        store.close()
    assert "Traceback" not in (dead.error or "")
    assert len((dead.error or "").splitlines()) == 1
    assert "once decompressed (a gzip bomb?)" in (dead.error or "")


def test_crawl_refuses_to_block_inside_a_running_loop(db_url: str) -> None:
    class Nothing(Spider):
        name = "nothing"

    async def inside() -> None:
        crashsafe.crawl(Nothing, db=db_url)

    with pytest.raises(ConfigError, match="crawl_async"):
        asyncio.run(inside())


def test_crawl_async_returns_the_result(site: Any, db_url: str) -> None:
    s = site({"/": lambda r: "<p>x</p>"})

    class One(Spider):
        name = "one"
        start_urls = [f"{s.url}/"]

        def parse(self, page: Any) -> Any:
            yield Record(key="k", data={"v": 1})

    result = asyncio.run(crashsafe.crawl_async(One, db=db_url))
    assert not result.interrupted
    assert (result.stats.done, result.stats.records) == (1, 1)


def test_a_redirect_to_another_origin_drops_the_requests_credentials(
    site: Any, db_url: str
) -> None:
    away = site({"/echo": lambda r: "<p>away</p>"})
    elsewhere = away.url.replace("127.0.0.1", "localhost") + "/echo"

    def hop(request: web.Request) -> web.StreamResponse:
        target = elsewhere if request.path == "/away" else "/echo"
        raise web.HTTPFound(target)

    s = site({"/away": hop, "/here": hop, "/echo": lambda r: "<p>here</p>"})

    class Secrets(Spider):
        name = "secrets"
        start_urls: list[str] = []
        obey_robots = False
        http_user, http_pass = "user", "pw"
        allowed_domains = [s.url.removeprefix("http://"), elsewhere.split("/")[2]]
        allowed_addresses = ["loopback"]  # another port: named to be reached (#24)

        def start_requests(self) -> Any:
            for path in ("/away", "/here"):
                yield Request(
                    s.url + path,
                    headers={"Authorization": "Bearer SECRET", "X-Other": "kept"},
                    cookies={"token": "t1"},
                )

        def parse(self, page: Any) -> Any:
            return []

    crashsafe.crawl(Secrets, db=db_url)
    [far] = away.seen
    assert "Authorization" not in far.headers and "Cookie" not in far.headers
    assert far.headers["X-Other"] == "kept"
    [near] = [r for r in s.seen if r.path == "/echo"]
    assert near.headers["Authorization"] == "Bearer SECRET"
    assert near.cookies["token"] == "t1"


def test_basic_auth_is_not_sent_to_another_port_of_the_start_host(site: Any, db_url: str) -> None:
    other = site({"/other": lambda r: "<p>other</p>"})
    s = site({"/": lambda r: f"<a href='{other.url}/other'>o</a>"})

    class Ports(Spider):
        name = "ports"
        start_urls = [f"{s.url}/"]
        obey_robots = False
        http_user, http_pass = "user", "pw"
        allowed_domains = [s.url.removeprefix("http://"), other.url.removeprefix("http://")]
        allowed_addresses = ["loopback"]  # another port: named to be reached (#24)

        def parse(self, page: Any) -> Any:
            yield from page.follow_all(css="a::attr(href)")

    crashsafe.crawl(Ports, db=db_url)
    [start] = [r for r in s.seen if r.path == "/"]
    assert start.headers["Authorization"] == "Basic dXNlcjpwdw=="
    [away] = other.seen
    assert "Authorization" not in away.headers


def test_requests_that_cannot_be_sent_are_skipped_and_counted(site: Any, db_url: str) -> None:
    s = site({"/": lambda r: "<p>x</p>", "/ok": lambda r: "<p>ok</p>"})

    class Bad(Spider):
        name = "bad"
        start_urls = [f"{s.url}/"]

        def parse(self, page: Any) -> Any:
            if not page.url.endswith("/"):
                return
            yield Request(page.urljoin("/b1"), method="PO ST")
            yield Request(page.urljoin("/b2"), method="POST", body={"a": 1})  # type: ignore[arg-type]
            yield Request(page.urljoin("/b3"), headers={"X-N": 5})  # type: ignore[dict-item]
            yield Request(page.urljoin("/b4"), meta={"proxy": "not a url"})
            yield Request(page.urljoin("/b5"), priority=2**70)
            yield page.follow("/ok")

    result = crashsafe.crawl(Bad, db=db_url)
    assert (result.stats.done, result.stats.failed, result.stats.links_skipped) == (2, 0, 5)
    assert {r.path for r in s.seen} == {"/robots.txt", "/", "/ok"}


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"priority": "high"}, "priority 'high' is not an integer"),
        ({"body": {"a": 1}}, "body must be bytes or str"),
        ({"method": "PO ST"}, "is not an HTTP method"),
        ({"callback": "not a name"}, "is not the name of a spider method"),
        ({"meta": {"t": object()}}, "meta must hold JSON"),
    ],
)
def test_a_bad_start_request_is_a_config_error(
    db_url: str, bad: dict[str, Any], message: str
) -> None:
    class Start(Spider):
        name = "start"

        def start_requests(self) -> Any:
            return [Request("http://127.0.0.1:9/", **bad)]

    with pytest.raises(ConfigError, match=message):
        crashsafe.crawl(Start, db=db_url)


def test_a_chain_of_sitemap_indexes_ends(site: Any, db_url: str) -> None:
    base: list[str] = []

    def chain(request: web.Request) -> web.Response:
        n = int(request.query.get("n", "0"))
        body = sitemap_xml("sitemapindex", [(f"{base[0]}/index?n={n + 1}", "2026-11-01")])
        return web.Response(body=body, content_type="application/xml")

    s = site({"/index": chain})
    base.append(s.url)

    class Chain(Spider):
        name = "chain"
        sitemap_urls = [f"{s.url}/index"]

    crashsafe.crawl(Chain, db=db_url)
    from crashsafe.crawl.spider import MAX_SITEMAP_DEPTH

    assert sum(r.path == "/index" for r in s.seen) == MAX_SITEMAP_DEPTH + 1


def test_an_item_key_that_is_not_a_string_or_integer_fails_the_page(site: Any, db_url: str) -> None:
    s = site({"/": lambda r: "<p>x</p>"})

    class Listy(Spider):
        name = "listy"
        start_urls = [f"{s.url}/"]
        item_key = "sku"

        def parse(self, page: Any) -> Any:
            yield {"sku": ["a", "b"]}

    result = crashsafe.crawl(Listy, db=db_url)
    assert result.stats.failed == 1 and result.stats.records == 0
    store = open_store(db_url, create=False, readonly=True)
    [failed] = store.failed("listy")
    store.close()
    assert "must be a string or an integer, not list" in (failed.error or "")


def test_a_failed_cookie_load_puts_the_pages_back_and_the_crawl_goes_on(
    site: Any, db_url: str
) -> None:
    """Loading newer stored cookies before starting pages fails once: those pages go back
    to the queue unfetched and are crawled later (the failure used to end the committer,
    and every page waiting on it with it)."""

    def login(request: web.Request) -> web.Response:
        response = web.Response(text="<a href='/a'>a</a><a href='/b'>b</a>",
                                content_type="text/html")  # fmt: skip
        response.set_cookie("session", "s1")
        return response

    def page(request: web.Request) -> str:
        return request.cookies.get("session", "none")

    s = site({"/login": login, "/a": page, "/b": page})

    class Cookies(Spider):
        name = "cookies"
        start_urls = [f"{s.url}/login"]

        def parse(self, page: Any) -> Any:
            if page.url.endswith("/login"):
                yield from page.follow_all(css="a::attr(href)")
            else:
                yield Record(key=page.url, data={"session": page.text})

    store = open_store(db_url)
    original = store.cookies
    calls = 0

    def fails_once(crawl: str) -> Any:
        nonlocal calls
        calls += 1
        if calls == 2:  # the first is at start; the second, before /a and /b start
            raise StoreError("the database went away for a moment")
        return original(crawl)

    store.cookies = fails_once  # type: ignore[method-assign]
    crawler = crashsafe.Crawler(
        Cookies(), store, handle_signals=False,
        store_process=False,  # the test wraps a method of this very store object
    )  # fmt: skip
    try:
        result = asyncio.run(asyncio.wait_for(crawler.run(), 60))
        assert calls >= 3 and result.stats.done == 3 and result.stats.failed == 0
        assert [r.data for r in store.iter_records("cookies")] == [{"session": "s1"}] * 2
    finally:
        store.close()
