"""A crawl goes only where it is allowed: links, redirects and robots.txt redirects to
other hosts, other ports and special addresses, in every spelling that two URL parsers read
differently, send no request outside the allow-list and store nothing from outside it."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from crashsafe import Page, Record, Spider, open_store
from crashsafe.crawl.addresses import AddressGuard, AddressRefused, GuardedResolver
from crashsafe.demo.server import AppThread
from crashsafe.store import Store
from tests.faults.conftest import run_crawl

SECRET = "internal: do not store"


class Counting:
    """A server that answers everything and counts what it was asked."""

    def __init__(self, *, redirects: dict[str, str] | None = None) -> None:
        self.hits: Counter[str] = Counter()
        self.redirects = redirects or {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[request.path_qs] += 1
        if request.path in self.redirects:
            return web.Response(status=302, headers={"Location": self.redirects[request.path]})
        text = f"<html><b class=v>{SECRET if request.path != '/start' else 'start'}</b></html>"
        return web.Response(text=text, content_type="text/html")


class Hostile(Spider):
    name = "hostile"
    max_attempts = 1
    timeout = 2.0
    spellings: list[str] = []

    def parse(self, page: Page) -> Iterator[Any]:
        if urlsplit(page.url).path == "/start":
            yield from self.spellings  # exactly as written: no HTML parser in between
            yield from page.follow_all([f"/r/{n}" for n in range(len(REDIRECTS))])
        yield Record(page.url, {"v": page.css(".v::text").get()})


REDIRECTS: list[str] = []


def crawl(store: Store, start: str, resolver: AbstractResolver | None = None, **kw: Any) -> Any:
    return run_crawl(Hostile(), store, start, resolver=resolver, **kw)


def test_no_request_leaves_the_allow_list(store: Store) -> None:
    allowed, other_port, other_host = Counting(), Counting(), Counting()
    with (
        AppThread(other_port.app()) as p2,
        AppThread(other_host.app(), host="127.0.0.2") as p3,
    ):
        a, b, c = "127.0.0.1", p2.port, p3.port
        other = f"127.0.0.2:{c}"
        with AppThread(allowed.app()) as p1:
            me = f"{a}:{p1.port}"
            spellings = [
                f"http://{a}:{b}/port",  # the allowed host on another port
                f"http://{other}/host",  # another host
                f"http://{other}\\@{me}/x",  # backslash: w3lib reads "\" as "/"
                f"http://{other}\\.{me}/x",
                f"http://169.254.169.254\\@{me}/../latest/meta-data/",
                f"http://127.0.0.2\x00.{me}/nul",  # getaddrinfo stops at the NUL
                f"http://{me}@{other}/at",  # userinfo: the host is after the "@"
                f"http://user:pw@{me}/cred",  # credentials are never stored
                f"http://2130706434:{c}/decimal",  # 127.0.0.2 written as a number
                f"http://0x7f.0.0.2:{c}/hex",
                f"http://127.1:{c}/short",
                f"http://[::ffff:127.0.0.2]:{c}/mapped",
                f"http://１２７.０.０.２:{c}/fullwidth",  # maps to 127.0.0.2 (UTS #46)
                f"http://127.0.0.\u200b2:{c}/zerowidth",
                f"http://0.0.0.0:{p1.port}/zero",  # connects to this machine
                f"http://localhost:{p1.port}/localhost",
                f"http://{me}:99999/port-range",
                f"http://[{me}]/brackets",
                f"http://{me}/\udc80",
            ]
            REDIRECTS[:] = [
                f"http://{a}:{b}/r-port",
                f"http://{other}/r-host",
                f"http://{other}\\@{me}/r-backslash",
                "http://169.254.169.254/latest/meta-data/",
                f"http://0.0.0.0:{p1.port}/r-zero",
                f"http://user:pw@{me}/r-cred",
            ]
            allowed.redirects = {f"/r/{n}": to for n, to in enumerate(REDIRECTS)}
            allowed.redirects["/robots.txt"] = f"http://{other}/robots.txt"
            Hostile.spellings = spellings
            result = crawl(store, f"http://{me}/start")
            records = list(store.iter_records("hostile"))
            failed = store.failed("hostile")
    # nothing reached another port or host
    assert other_port.hits == Counter() and other_host.hits == Counter()
    # the allowed site saw only its own pages: the start page, robots.txt, the redirects
    assert set(allowed.hits) == {"/start", "/robots.txt"} | set(allowed.redirects)
    # every spelling was either left out (off the list) or skipped and counted
    assert result.stats.links_skipped >= 12
    assert result.stats.known == 1 + len(REDIRECTS)  # start + the /r/ pages, nothing else
    # what was stored is from the allowed site only
    assert {urlsplit(r.key).netloc for r in records} == {me}
    assert all(SECRET not in str(r.data) for r in records if "/start" not in r.key)
    # a redirect to a URL that cannot be crawled fails its page, naming why
    reasons = {f.url.rsplit("/", 1)[1]: f.error or "" for f in failed}
    assert "backslash" in reasons["2"] and "credentials" in reasons["5"]


class MapTo(AbstractResolver):
    """A resolver that maps every name to one address (a public-looking name pointing at a
    private address, as an attacker's DNS would)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        return [
            ResolveResult(
                hostname=host, host=self.address, port=port, family=family, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        pass


def test_a_public_name_that_resolves_to_a_private_address_is_refused(store: Store) -> None:
    from crashsafe.crawl.metrics import WorkerMetrics

    site = Counting()
    metrics = WorkerMetrics("hostile")
    with AppThread(site.app()) as thread:
        start = f"http://public.example:{thread.port}/start"
        result = crawl(store, start, MapTo("127.0.0.1"), metrics=metrics)
        [dead] = store.failed("hostile")
    assert site.hits == Counter()  # refused before any connection
    assert "public.example (127.0.0.1) is a loopback address: refused" in (dead.error or "")
    assert "allowed_addresses=loopback" in (dead.error or "")
    assert result.stats.failed == 1
    assert result.stats.requests == 0  # (refused by the resolver: no request was made)
    assert not any(  # nor in the worker's own counters (crawl --metrics-port)
        s.value for m in metrics.registry.collect() for s in m.samples
        if s.name == "crashsafe_requests_total"
    )  # fmt: skip


def test_allowed_addresses_opens_a_named_range(db_url: str) -> None:
    site = Counting()
    store = open_store(db_url)
    try:
        with AppThread(site.app()) as thread:
            resolver = MapTo("127.0.0.1")
            crawl(
                store,
                f"http://public.example:{thread.port}/start",
                resolver,
                allowed_addresses=("loopback",),
            )
    finally:
        store.close()
    assert site.hits["/start"] == 1 and "public.example" in resolver.asked


def test_an_ip_literal_in_a_special_range_is_refused_even_when_its_host_is_allowed(
    store: Store,
) -> None:
    site = Counting()
    with AppThread(site.app()) as thread:
        # "*:*" allows every host and port: the address guard still stands
        Hostile.spellings = [f"http://0.0.0.0:{thread.port}/zero", "http://10.1.2.3:9/private"]
        REDIRECTS[:] = []
        crawl(store, f"http://127.0.0.1:{thread.port}/start", allowed_domains=("*:*",))
        failed = {f.url: f.error or "" for f in store.failed("hostile")}
    assert set(site.hits) == {"/start", "/robots.txt"}  # 0.0.0.0 would have reached it
    assert "unspecified address: refused" in failed[f"http://0.0.0.0:{thread.port}/zero"]
    assert "private address: refused" in failed["http://10.1.2.3:9/private"]


def test_the_guard_keeps_only_allowed_addresses_of_a_name() -> None:
    class Mixed(MapTo):
        async def resolve(
            self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
        ) -> list[ResolveResult]:
            return [
                ResolveResult(hostname=host, host=a, port=port, family=family, proto=0, flags=0)
                for a in ("169.254.169.254", "93.184.215.14", "::1")
            ]

    resolver = GuardedResolver(AddressGuard(), Mixed(""))
    kept = asyncio.run(resolver.resolve("rebinding.example", 80))
    assert [r["host"] for r in kept] == ["93.184.215.14"]
    only_private = GuardedResolver(AddressGuard(), MapTo("192.168.1.1"))
    with pytest.raises(AddressRefused, match="private address"):
        asyncio.run(only_private.resolve("intranet.example", 80))
    with_range = GuardedResolver(AddressGuard(["192.168.0.0/16"]), MapTo("192.168.1.1"))
    assert len(asyncio.run(with_range.resolve("intranet.example", 80))) == 1


def test_a_proxy_given_by_its_address_is_checked_by_the_guard() -> None:
    """meta["proxy"] = "http://127.0.0.1:PORT" on a crawl of public sites: the connection
    would end at loopback, so the address guard refuses it before connecting (a proxy
    given by name goes through the guarded resolver)."""
    from crashsafe.crawl.fetch import Send, fetch, new_session
    from crashsafe.crawl.settings import CrawlSettings

    async def go() -> None:
        settings = CrawlSettings()
        async with new_session(settings) as session:
            for proxy in ("http://127.0.0.1:9", "http://[::ffff:127.0.0.1]:9"):
                with pytest.raises(AddressRefused, match="loopback"):
                    await fetch(
                        session, "http://public.example/", settings, guard=AddressGuard(),
                        send=Send(proxy=proxy),
                    )  # fmt: skip

    asyncio.run(go())
