"""A proxy must not open what the allow-list and the address guard close (issue #24 items 1
and 2): pages, robots.txt and downloads all go through it, its own address is reachable as
the proxy only, and every target is checked before it is handed to the proxy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from crashsafe import Page, Record, Spider
from crashsafe.demo.server import AppThread
from crashsafe.store import Store
from tests.faults.conftest import run_crawl
from tests.faults.proxy import forward_proxy
from tests.faults.test_security import Counting, MapTo


class ThroughProxy(Spider):
    name = "proxied"
    max_attempts = 1
    timeout = 5.0
    canary: list[str] = []

    def parse(self, page: Page) -> Iterator[Any]:
        if page.url.endswith("/start"):
            yield from self.canary  # links to the canary, in three spellings
            yield Record("start", {"files": [page.download(u) for u in self.canary]})
            yield page.download(page.urljoin("/picture.png"))  # an allowed download
        else:
            yield Record(page.url, {"v": "reached"})


def test_a_proxy_opens_nothing_and_carries_everything(store: Store) -> None:
    site, canary = Counting(), Counting()
    with (
        forward_proxy() as proxy,
        AppThread(site.app()) as me,
        AppThread(canary.app(), host="127.0.0.2") as internal,
    ):
        c = internal.port
        ThroughProxy.canary = [
            f"http://127.0.0.2:{c}/literal",
            f"http://internal.test:{c}/name",  # a name mapped to 127.0.0.2
            f"http://[::ffff:127.0.0.2]:{c}/mapped",
        ]
        result = run_crawl(
            ThroughProxy(), store, f"{me.url}/start",
            resolver=MapTo("127.0.0.2"),  # every name: the internal canary
            proxy=f"http://u:p@127.0.0.1:{proxy.port}",
            allowed_addresses=("127.0.0.1/32",),
            allowed_domains=("*:*",), allowed_download_domains=("*:*",),
        )  # fmt: skip
        records = {r.key: r.data for r in store.iter_records("proxied")}
        failed = {f.url: f.error or "" for f in store.failed("proxied")}
    # the canary received nothing, by any spelling, for pages, robots.txt or downloads
    assert canary.hits == Counter()
    # every request the crawl made went through the proxy, robots.txt and downloads too
    assert sorted(proxy.log) == sorted(
        f"GET {me.url}{path}" for path in ("/robots.txt", "/start", "/picture.png")
    )
    assert site.hits == Counter({"/robots.txt": 1, "/start": 1, "/picture.png": 1})
    # the links and the downloads to the canary were refused, saying why
    assert len(failed) == 3 and all("loopback address: refused" in e for e in failed.values())
    files = records["start"]["files"]
    assert [f.get("sha256") for f in files] == [None, None, None]
    assert all("loopback address: refused" in f["error"] for f in files), files
    assert result.stats.done == 1
    # refused before the network: not counted as requests (the start page's alone is)
    assert result.stats.requests == 1 and result.stats.failed == 3


def test_downloads_have_an_allow_decision_of_their_own(store: Store) -> None:
    site, other_port = Counting(), Counting()
    with AppThread(site.app()) as me, AppThread(other_port.app()) as other:

        class Downloads(Spider):
            name = "downloads"
            max_attempts = 1

            def parse(self, page: Page) -> Iterator[Any]:
                targets = [f"{other.url}/p.png", f"http://other.test:{other.port}/q.png",
                           f"{me.url}/own.png"]  # fmt: skip
                yield Record("k", {"files": [page.download(u) for u in targets]})

        run_crawl(Downloads(), store, f"{me.url}/start", resolver=MapTo("127.0.0.1"))
        [record] = list(store.iter_records("downloads"))
    # (#24 item 2: a start URL on 127.0.0.1 let downloads reach its other ports and names)
    assert other_port.hits == Counter()
    other_file, named, own = record.data["files"]
    assert "outside allowed_download_domains" in other_file["error"]
    assert "outside allowed_download_domains" in named["error"]
    assert own["sha256"] and site.hits["/own.png"] == 1


def test_the_proxys_own_name_is_not_reached_as_a_server(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (a review of #24: HTTP_PROXY=http://u:p@localhost:PX with NO_PROXY=localhost: a link
    # to http://localhost:PX/ went direct, and the resolver let the proxy's name through)
    site = Counting()
    with forward_proxy() as proxy, AppThread(site.app()) as me:
        monkeypatch.setenv("HTTP_PROXY", f"http://u:p@localhost:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
        ThroughProxy.canary = [f"http://localhost:{proxy.port}/as-origin"]
        run_crawl(
            ThroughProxy(), store, f"{me.url}/start", obey_robots=False,
            allowed_domains=("*:*",), allowed_download_domains=("*:*",),
        )  # fmt: skip
        failed = {f.url: f.error or "" for f in store.failed("proxied")}
        files = {r.key: r.data for r in store.iter_records("proxied")}["start"]["files"]
    assert proxy.log == []  # neither as a server nor as the proxy (NO_PROXY: direct)
    assert "loopback address: refused" in failed[f"http://localhost:{proxy.port}/as-origin"]
    assert "loopback address: refused" in files[0]["error"]
