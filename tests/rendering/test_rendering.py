"""Rendered pages (issue #28): Chromium through Playwright, against real sites on loopback.

Each crawl's browser runs in the test's own process tree (a worker of the test process):
``browser_processes(os.getpid())`` finds its processes, so every test also checks that
none is left when the crawl is over.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from crashsafe import ConfigError, Page, Record, Spider, crawl
from crashsafe.crawl.browser import browser_processes
from crashsafe.demo.rendered import DemoShopRendered
from crashsafe.demo.server import AppThread
from crashsafe.demo.shop import ShopThread, needs_js, product, sku
from crashsafe.store import Store, open_store
from tests.faults.conftest import run_crawl
from tests.faults.test_security import Counting
from tests.helpers import run_cli, wait_for
from tests.rendering.site import JsSite, TcpCanary


def no_browser_left() -> None:
    wait_for(lambda: not browser_processes(os.getpid()), timeout=30)


@pytest.fixture
def site() -> Iterator[tuple[JsSite, str]]:
    app = JsSite()
    with AppThread(app.app()) as served:
        yield app, served.url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = open_store(db_url)
    yield s
    s.close()


class Prices(Spider):
    name = "prices"
    max_attempts = 2
    backoff_base = 0.01

    def parse(self, page: Page) -> Iterator[Any]:
        yield from page.follow_all(css="a::attr(href)")
        price = page.css(".price::text").get()
        if price is not None:
            yield Record(page.url.rsplit("/", 1)[1], {"price": price})


class HeldPrices(Prices):
    render_wait_for = ".price"  # /held's price comes when the server lets its API answer


def test_pages_built_by_scripts_are_rendered_and_their_records_stored(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    app, url = site
    start = f"{url}/links?" + "&".join(f"to=/js/{n}" for n in range(1, 6))
    result = run_crawl(Prices(), store, start, render=True, browser_executable=chromium)
    records = {r.key: r.data for r in store.iter_records("prices")}
    assert records == {str(n): {"price": f"{n}.00"} for n in range(1, 6)}
    assert result.stats.failed == 0
    assert all(app.hits[f"/js/{n}"] == 1 for n in range(1, 6))  # downloaded once each
    no_browser_left()


def test_without_rendering_the_same_pages_have_no_price(
    site: tuple[JsSite, str], store: Store
) -> None:
    """The control: as fetched, the script's price is not in the page (no Chromium needed)."""
    _, url = site
    run_crawl(Prices(), store, f"{url}/js/1")
    assert list(store.iter_records("prices")) == []


def test_auto_renders_only_the_pages_that_need_it_and_counts_them(
    shop: Callable[..., ShopThread], any_db_url: str, chromium: str
) -> None:
    db_url = any_db_url
    site = shop(listings=3, per_listing=8, js=0.5, seed=3)
    options = site.shop.options
    js_pages = [n for n in range(options.products) if needs_js(n, options)]
    assert 0 < len(js_pages) < options.products  # the draw gave a mix
    result = crawl(DemoShopRendered, db=db_url, start_urls=[f"{site.url}/list/0"],
                   browser_executable=chromium)  # fmt: skip
    assert result.stats.failed == 0
    store = open_store(db_url)
    try:
        records = {r.key: r.data for r in store.iter_records("demo-shop-js")}
        counts = store.render_patterns("demo-shop-js")
    finally:
        store.close()
    assert records == {
        sku(n): {k: v for k, v in product(n).items() if k != "sku"} for n in range(options.products)
    }
    # every JavaScript product page went to the browser, every other page did not
    origin = site.url
    assert counts == {
        f"{origin}/list/*": (options.listings, 0),
        f"{origin}/product/*": (options.products - len(js_pages), len(js_pages)),
    }
    # each rendered page ran its script once: its script and its data fetched once each
    assert site.shop.counts["api"] == 2 * len(js_pages)
    shown = run_cli("status", "--db", db_url).stdout
    fetched = options.listings + options.products - len(js_pages)
    assert (f"rendered  auto: {len(js_pages)} pages needed the browser, {fetched} did not "
            "(2 URL patterns)") in shown  # fmt: skip
    no_browser_left()


def test_auto_learns_a_pattern_that_needs_the_browser_and_remembers_it(
    shop: Callable[..., ShopThread], db_url: str, chromium: str
) -> None:
    site = shop(listings=2, per_listing=5, js=1.0)
    crawl(DemoShopRendered, db=db_url, start_urls=[f"{site.url}/list/0"], max_pages=4,
          browser_executable=chromium, concurrency=1)  # fmt: skip
    store = open_store(db_url)
    try:
        first = store.render_patterns("demo-shop-js")
    finally:
        store.close()
    assert first[f"{site.url}/product/*"][0] == 0  # no product page was fine as fetched
    crawl(DemoShopRendered, db=db_url, start_urls=[f"{site.url}/list/0"],
          browser_executable=chromium)  # fmt: skip
    store = open_store(db_url)
    try:
        counts = store.render_patterns("demo-shop-js")
        records = list(store.iter_records("demo-shop-js"))
    finally:
        store.close()
    assert len(records) == 10
    # the resumed run rendered product pages straight away: none was tried as fetched
    assert counts[f"{site.url}/product/*"] == (0, 10)


def test_cookies_go_from_http_to_the_browser_and_back(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    app, url = site

    class Cookies(Spider):
        name = "cookies"
        max_attempts = 1

        def parse(self, page: Page) -> Iterator[Any]:
            if page.url.endswith("/login"):
                yield page.follow("/cookies", render=True)
            elif page.url.endswith("/cookies"):
                yield Record("seen", {"cookie": page.css("#seen::text").get()})
                yield page.follow("/after")  # fetched, not rendered
            else:
                yield Record("after", {"price": page.css(".price::text").get()})

    run_crawl(Cookies(), store, f"{url}/login", browser_executable=chromium)
    records = {r.key: r.data for r in store.iter_records("cookies")}
    # HTTP -> browser: the page's script saw the cookie the login response set
    assert records["seen"] == {"cookie": "http_side=from-http"}
    # browser -> HTTP: the next page, fetched, carried the cookie the script set
    assert app.cookies_seen["/after"] == {"http_side": "from-http", "js_side": "from-script"}
    # ... and it is stored with the page, as every cookie is: a restart sends it again
    stored = dict(header.split(";")[0].split("=", 1) for _, header in store.cookies("cookies").rows)
    assert stored == {"http_side": "from-http", "js_side": "from-script"}
    no_browser_left()


def test_a_rendered_pages_frames_obey_robots_txt(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    app, url = site
    run_crawl(Prices(), store, f"{url}/frames", render=True, browser_executable=chromium)
    assert {r.key: r.data for r in store.iter_records("prices")} == {"frames": {"price": "1"}}
    assert app.hits["/open/frame"] == 1  # a frame the site allows is loaded (through us)
    assert app.hits["/private/frame"] == 0  # robots.txt disallows /private/: never asked
    no_browser_left()


@pytest.mark.parametrize("browser_allowed", [None, ("*:*",)], ids=["allow-list", "guard"])
def test_a_script_cannot_reach_another_loopback_address(
    site: tuple[JsSite, str], store: Store, chromium: str, browser_allowed: Any
) -> None:
    """The canary on 127.0.0.2 receives nothing: refused by the allow-list, or, with every
    host allowed for the browser, by the address guard."""
    app, url = site
    canary = Counting()
    with AppThread(canary.app(), host="127.0.0.2") as internal:
        app.canary = internal.url
        run_crawl(Prices(), store, f"{url}/reach", render=True, browser_executable=chromium,
                  browser_allowed_domains=browser_allowed, browser_block=())  # fmt: skip
    assert canary.hits == Counter()
    records = {r.key: r.data for r in store.iter_records("prices")}
    assert records == {"reach": {"price": "shown"}}  # the page itself was rendered
    no_browser_left()


def test_a_page_whose_script_never_settles_is_cut_at_its_budget(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    _, url = site
    start = f"{url}/links?to=/hang&to=/js/7"
    run_crawl(Prices(), store, start, render=True, render_timeout=6.0, browser_executable=chromium)
    failed = {f.url: f.error or "" for f in store.failed("prices")}
    assert list(failed) == [f"{url}/hang"]
    assert "render took longer than render_timeout=6s" in failed[f"{url}/hang"]
    assert "gave up after 2 attempts" in failed[f"{url}/hang"]
    # the other page, rendered by the same browser, is fine
    assert {r.key: r.data for r in store.iter_records("prices")} == {"7": {"price": "7.00"}}
    no_browser_left()


def test_a_pages_render_budget_starts_when_a_browser_page_is_free_for_it(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    """One browser page, two pages that each take 4.5 s to load (an image, not blocked
    here), an 8 s budget: the second waits for the first (4.5 s), then renders in its own
    4.5 s (3.5 s to spare on a busy machine). Counted from the wait it would overrun (by
    1 s at least), and its image would be asked for again by the retry."""
    app, url = site
    app.slow = 4.5
    run_crawl(Prices(), store, f"{url}/links?to=/slow/1&to=/slow/2", render=True,
              render_timeout=8.0, browser_concurrency=1, browser_block=(),
              browser_executable=chromium)  # fmt: skip
    assert store.failed("prices") == []
    assert app.images == Counter({"1": 1, "2": 1})  # each rendered once, no retry
    records = {r.key: r.data for r in store.iter_records("prices")}
    assert records == {"1": {"price": "1.75"}, "2": {"price": "2.75"}}
    no_browser_left()


def test_pages_of_one_origin_rendered_at_once_keep_each_others_cookies(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    """Two pages of one origin in the browser at once (each held open by a slow image),
    each setting a cookie by script: both cookies reach the crawl's stored jar."""
    app, url = site
    app.slow = 1.0
    run_crawl(Prices(), store, f"{url}/links?to=/jar/a&to=/jar/b", render=True,
              browser_concurrency=2, browser_block=(), browser_executable=chromium)  # fmt: skip
    assert app.images == Counter({"jar-a": 1, "jar-b": 1})
    stored = dict(header.split(";")[0].split("=", 1) for _, header in store.cookies("prices").rows)
    assert stored == {"a": "set-by-a", "b": "set-by-b"}
    no_browser_left()


def crawl_held(
    app: JsSite,
    url: str,
    store: Store,
    chromium: str,
    pids: Callable[[], list[int]],
    sig: int,
    **settings: Any,
) -> list[int]:
    """Crawl ``/held`` rendered; once its script has asked for its price (which the
    server holds), send ``sig`` to the processes ``pids()`` names, then let the price
    come. Returns the processes signalled (a stopped one is killed after the crawl)."""
    app.held.set()
    signalled: list[int] = []

    def strike() -> None:
        app.held_asked.wait(60)
        for pid in pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                signalled.append(pid)
        app.held.clear()

    striker = threading.Thread(target=strike)
    striker.start()
    try:
        run_crawl(HeldPrices(), store, f"{url}/held", render=True,
                  browser_executable=chromium, **settings)  # fmt: skip
    finally:
        app.held.clear()
        striker.join()
        if sig == signal.SIGSTOP:
            for pid in signalled:  # (killed by the crawl; if not, not left stopped)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    return signalled


def test_a_browser_killed_mid_render_fails_only_that_attempt(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    app, url = site
    crawl_held(app, url, store, chromium, lambda: list(browser_processes(os.getpid())), 9)
    records = {r.key: r.data for r in store.iter_records("prices")}
    assert records == {"held": {"price": "9.99"}}  # the retry, in a new browser
    assert app.hits["/held"] == 2  # the page was fetched again for its second attempt
    no_browser_left()


def test_the_callback_drives_the_browser_and_rereads_the_page(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    class More(Spider):
        name = "more"
        render = True

        async def parse(self, page: Page) -> AsyncIterator[Any]:
            if page.browser is None:  # /after, fetched
                return
            before = page.css("#items li::text").getall()
            await page.browser.click("#more")  # (its handler also sets a cookie)
            await page.browser.wait_for_selector("#items li:nth-child(4)")
            await page.reread()
            yield Record("items", {"before": before, "after": page.css("#items li::text").getall()})
            yield page.follow("/after", render=False)

    app, url = site
    run_crawl(More(), store, f"{url}/more", browser_executable=chromium)
    records = {r.key: r.data for r in store.iter_records("more")}
    assert records == {"items": {"before": ["a", "b"], "after": ["a", "b", "c", "d"]}}
    # the cookie the click set came back to the crawl: sent with the next page, and stored
    assert app.cookies_seen["/after"] == {"clicked": "yes"}
    assert [h.split(";")[0] for _, h in store.cookies("more").rows] == ["clicked=yes"]


def test_contexts_and_the_browser_are_recycled_and_the_records_stay_right(
    shop: Callable[..., ShopThread], db_url: str, chromium: str, caplog: Any
) -> None:
    site = shop(listings=2, per_listing=10, js=1.0)
    with caplog.at_level(logging.INFO, logger="crashsafe.crawl"):
        crawl(DemoShopRendered, db=db_url, start_urls=[f"{site.url}/list/0"],
              browser_executable=chromium, browser_recycle_pages=3,
              browser_max_memory_mb=1)  # fmt: skip
    store = open_store(db_url)
    try:
        records = {r.key: r.data for r in store.iter_records("demo-shop-js")}
    finally:
        store.close()
    assert records == {
        sku(n): {k: v for k, v in product(n).items() if k != "sku"} for n in range(20)
    }
    assert "restarting it once its pages are done" in caplog.text  # over the 1 MiB ceiling
    no_browser_left()


def test_no_chromium_is_one_line_naming_the_install_command(
    site: tuple[JsSite, str], db_url: str
) -> None:
    _, url = site
    with pytest.raises(ConfigError, match="apt-get install chromium"):
        crawl(Prices, db=db_url, start_urls=[f"{url}/js/1"], render=True,
              browser_executable="/nonexistent/chromium")  # fmt: skip


def test_auto_without_a_selector_is_refused() -> None:
    with pytest.raises(ConfigError, match="render_when_missing"):
        Prices.crawl_settings(render="auto")


def test_no_way_out_of_a_rendered_page_reaches_a_forbidden_address(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    """Popups, new tabs, a form, a frame, a WebSocket, a beacon and preconnect hints aimed
    at 127.0.0.2, with every host allowed for the browser: not one connection arrives (the
    address guard refuses what is routed; Chromium's own connections go to a proxy that
    does not exist)."""
    app, url = site
    canary = TcpCanary()
    try:
        app.canary = canary.url
        run_crawl(Prices(), store, f"{url}/escape", render=True, browser_executable=chromium,
                  browser_allowed_domains=("*:*",), browser_block=())  # fmt: skip
    finally:
        canary.close()
    assert canary.connections == 0
    assert {r.key for r in store.iter_records("prices")} == {"escape"}
    no_browser_left()


def test_auto_is_not_sent_to_the_browser_by_a_page_it_does_not_help(
    site: tuple[JsSite, str], db_url: str, chromium: str
) -> None:
    """/item/0 has no price rendered or not (sold out): rendering it did not help, so the
    pattern's other pages, whole as fetched, are not rendered."""
    _, url = site

    class Items(Prices):
        render = "auto"
        render_when_missing = ".price, a"

    start = f"{url}/links?" + "&".join(f"to=/item/{n}" for n in range(10))
    crawl(Items, db=db_url, start_urls=[start], browser_executable=chromium, concurrency=1)
    store = open_store(db_url)
    try:
        counts = store.render_patterns("prices")
        records = {r.key for r in store.iter_records("prices")}
    finally:
        store.close()
    assert counts[f"{url}/item/*"] == (10, 0)
    assert records == {str(n) for n in range(1, 10)}


def test_a_request_to_render_without_chromium_stops_the_crawl_and_keeps_the_page(
    site: tuple[JsSite, str], db_url: str
) -> None:
    _, url = site

    class One(Prices):
        def parse(self, page: Page) -> Iterator[Any]:
            yield page.follow("/js/1", render=True)

    with pytest.raises(ConfigError, match="apt-get install chromium"):
        crawl(One, db=db_url, start_urls=[f"{url}/links"],
              browser_executable="/nonexistent/chromium")  # fmt: skip
    store = open_store(db_url)
    try:
        assert store.failed("prices") == []  # not failed: it waits for a machine with one
        assert store.stats("prices").pending == 1
    finally:
        store.close()


def test_a_driver_killed_mid_render_fails_only_that_attempt(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    """Playwright's driver (node) dies and takes the browser along: the page is retried
    with a new driver and browser."""
    app, url = site
    crawl_held(app, url, store, chromium, lambda: _drivers(os.getpid()), 9)
    failed = [(f.url, f.error) for f in store.failed("prices")]
    assert failed == []
    assert {r.key: r.data for r in store.iter_records("prices")} == {"held": {"price": "9.99"}}
    assert app.hits["/held"] == 2
    no_browser_left()


def _drivers(parent: int) -> list[int]:
    """The Playwright drivers (node) among ``parent``'s children."""
    found = []
    for pid in _children(parent):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"playwright" in f.read():
                found.append(pid)
    return found


def _children(parent: int) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2 :].split()[1]) == parent:
                found.append(int(entry.name))
    return found


def test_a_browser_that_stops_answering_is_killed_and_replaced(
    site: tuple[JsSite, str], store: Store, chromium: str
) -> None:
    """The browser is paused (SIGSTOP) mid-render: the page is cut at its budget, the
    browser that does not close is killed, and the retry renders in a new one."""
    app, url = site
    paused = crawl_held(app, url, store, chromium,
                        lambda: list(browser_processes(os.getpid())), signal.SIGSTOP,
                        render_timeout=6.0)  # fmt: skip
    assert paused
    assert {r.key: r.data for r in store.iter_records("prices")} == {"held": {"price": "9.99"}}
    assert app.hits["/held"] == 2
    no_browser_left()


def test_a_chromium_that_does_not_start_stops_the_crawl(
    site: tuple[JsSite, str], db_url: str, chromium: str, tmp_path: Any
) -> None:
    """A browser that is there but fails to start (a snap stub in a container) would fail
    every page to the dead letter: the crawl stops instead, the page still pending."""
    _, url = site
    stub = tmp_path / "chromium"
    stub.write_text("#!/bin/sh\necho 'not really a browser' >&2\nexit 1\n")
    stub.chmod(0o755)
    with pytest.raises(ConfigError, match="did not start"):
        crawl(Prices, db=db_url, start_urls=[f"{url}/js/1"], render=True,
              browser_executable=str(stub))  # fmt: skip
    store = open_store(db_url)
    try:
        assert store.failed("prices") == [] and store.stats("prices").pending == 1
    finally:
        store.close()
