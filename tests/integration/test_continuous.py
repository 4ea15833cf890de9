"""Continuous crawling (issue #29 items 2, 3, 5): each page's next visit from its own
change history (an injected clock), `crawl --continuous` and `crawl --every` running
passes one at a time (two processes on one PostgreSQL crawl never overlap), and what
each pass did, in `status` and the summary."""

from __future__ import annotations

import contextlib
import json
import math
import re
import sqlite3
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

import crashsafe
from crashsafe import aio, open_store
from crashsafe.crawl.engine import Crawler
from crashsafe.crawl.revisits import revisit_interval
from crashsafe.demo.server import AppThread
from tests.clock import ManualClock
from tests.helpers import reaped, run_cli, start_cli, wait_for_line
from tests.spiders import changing
from tests.spiders.changing import Listed, Mapped, Pages

SPIDER = f"{changing.__file__}:Pages"

LOW, HIGH = Pages.revisit_min, Pages.revisit_max


class Changing:
    """``/`` links ``/often`` (another body at every request, no validators) and
    ``/never`` (the same body, an ETag, 304 to it); every request is counted."""

    def __init__(self, latency: float = 0.0, pages: int = 0) -> None:
        self.hits: Counter[str] = Counter()
        self.log: list[tuple[float, str]] = []  # (when, path) of every page request
        self.latency, self.pages = latency, pages
        self.not_modified = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/robots.txt":
            return web.Response(text="")
        self.hits[request.path] += 1
        self.log.append((time.monotonic(), request.path))
        if self.latency:
            import asyncio

            await asyncio.sleep(self.latency)
        if request.path == "/":
            paths = ["/often", "/never"] + [f"/p/{n}" for n in range(self.pages)]
            links = "".join(f'<a href="{p}">{p}</a>' for p in paths)
            return web.Response(text=f"<html>{links}</html>", content_type="text/html")
        if request.path == "/often":
            n = self.hits[request.path]
            return web.Response(text=f"<html><b>{n}</b></html>", content_type="text/html")
        if request.headers.get("If-None-Match") == '"v1"':
            self.not_modified += 1
            return web.Response(status=304, headers={"ETag": '"v1"'})
        return web.Response(text="<html><b>same</b></html>", content_type="text/html",
                            headers={"ETag": '"v1"'})  # fmt: skip


def test_revisit_interval_follows_the_share_of_visits_that_found_a_change() -> None:
    assert revisit_interval(0, 0, LOW, HIGH) == LOW  # a new page: soon, to learn
    assert revisit_interval(1, 0, LOW, HIGH) == pytest.approx(math.sqrt(LOW * HIGH))
    assert revisit_interval(50, 50, LOW, HIGH) == revisit_interval(10, 10, LOW, HIGH) == LOW
    assert revisit_interval(50, 45, LOW, HIGH) < revisit_interval(10, 5, LOW, HIGH)
    assert revisit_interval(50, 0, LOW, HIGH) > revisit_interval(10, 0, LOW, HIGH) > 3900
    always = [revisit_interval(n, n, LOW, HIGH) for n in range(1, 20)]
    never = [revisit_interval(n, 0, LOW, HIGH) for n in range(1, 20)]
    assert always == sorted(always, reverse=True) and never == sorted(never)
    assert all(LOW <= t <= HIGH for t in always + never)
    half = revisit_interval(40, 20, LOW, HIGH)
    assert revisit_interval(40, 30, LOW, HIGH) < half < revisit_interval(40, 10, LOW, HIGH)
    # a sitemap's changefreq is the first guess of a page with no history
    assert revisit_interval(0, 0, LOW, HIGH, guess=600) == pytest.approx(600)
    assert revisit_interval(0, 0, LOW, HIGH, guess=math.inf) == HIGH
    assert revisit_interval(0, 0, LOW, HIGH, guess=0) == LOW
    assert revisit_interval(3, 0, 60, 60) == 60  # min == max: that interval


def test_a_page_that_changes_at_every_visit_comes_back_sooner_than_one_that_never_does(
    any_db_url: str,
) -> None:
    site = Changing()
    clock = ManualClock()
    store = open_store(any_db_url, clock=clock, create=True)

    def run() -> None:
        crawler = Crawler(Pages(), store, start_urls=[f"{served.url}/"],
                          store_process=False, handle_signals=False)  # fmt: skip
        result = aio.run(crawler.run())
        assert not result.interrupted and result.stats.failed == 0

    try:
        with AppThread(site.app()) as served:
            run()  # pass 1: no history, every page back soon (to learn how it changes)
            assert store.begin_pass("changing").wait == pytest.approx(LOW)
            for visits in range(1, 7):  # six passes of every page, each due since HIGH
                clock.advance(HIGH)
                assert store.recrawl("changing", due=True).requeued == 3
                run()
                # the next page due is /often, at the interval its history gives
                wait = store.begin_pass("changing").wait
                assert wait == pytest.approx(revisit_interval(visits, visits, LOW, HIGH))
            assert site.hits == {"/": 7, "/often": 7, "/never": 7}
            # /often is due again long before /never (and the listing, which never changed)
            clock.advance(revisit_interval(6, 6, LOW, HIGH) + 1)
            assert store.recrawl("changing", due=True).requeued == 1
            run()
            assert site.hits["/often"] == 8 and site.hits["/never"] == 7
            [last] = store.pass_figures("changing", limit=1)
            assert (last.number, last.fetched, last.changed) == (8, 1, 1)  # /often's record
            # / and /never come back after the interval of six visits without a change
            clock.advance(revisit_interval(6, 0, LOW, HIGH) - revisit_interval(6, 6, LOW, HIGH) + 1)
            assert store.recrawl("changing", due=True).requeued == 3  # (/often long since)
    finally:
        store.close()


def test_crawl_continuous_runs_passes_of_the_pages_due_until_its_passes_are_done(
    db_url: str,
) -> None:
    site = Changing()
    with AppThread(site.app()) as served:
        done = run_cli(
            "crawl", SPIDER, "--db", db_url, "--start-url", f"{served.url}/",
            "--continuous", "--passes", "3", "-s", "revisit_min=0.2s", "-s",
            "revisit_max=0.5s", "--no-progress", timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert re.search(r"pass 2 begins: \d page\(s\) due", done.stderr), done.stderr
    assert "pass 3: " in done.stderr and "pass 4" not in done.stderr
    [status] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    passes = status["passes"]
    assert [p["pass"] for p in passes] == [3, 2, 1]
    assert passes[-1]["fetched"] == 3 and passes[-1]["created"] == 2
    # what the passes say they fetched is what the server saw, page for page
    assert sum(p["fetched"] for p in passes) == sum(site.hits.values())
    assert sum(p["not_modified"] for p in passes) == site.hits["/never"] - 1
    compact = run_cli("status", "--db", db_url).stdout
    assert "    pass 3: " in compact and "    pass 1: 3 pages fetched" in compact


def test_two_machines_crawling_every_n_seconds_never_run_two_passes_at_once(
    pg_url: str,
) -> None:
    pages = 10
    site = Changing(latency=0.3, pages=pages - 3)  # / /often /never /p/0..6
    with AppThread(site.app()) as served:
        args = [
            "crawl",
            SPIDER,
            "--db",
            pg_url,
            "--start-url",
            f"{served.url}/",
            "--every",
            "1s",
            "--passes",
            "3",
            "--concurrency",
            "1",
            "--no-progress",
        ]
        # a pass: ten pages, one at a time per worker, 0.3 s each: longer than --every
        with reaped(start_cli(*args)) as one, reaped(start_cli(*args)) as two:
            outs = [p.communicate(timeout=120) for p in (one, two)]
            codes = [one.returncode, two.returncode]
    assert codes == [0, 0], outs
    log = [path for _, path in sorted(site.log)]
    assert len(log) == 3 * pages
    # a pass fetches every page once: in the order the server saw them, each run of ten
    # requests is one pass's pages, each once (an overlap would fetch one twice first)
    for n in range(3):
        assert Counter(log[n * pages : (n + 1) * pages]) == Counter(set(log)), log
    stderr = outs[0][1] + outs[1][1]
    said = next(line for line in stderr.splitlines() if "after its time" in line)
    assert re.search(r"after its time: the last pass ran \d+s longer than --every 1s", said)


class Sitemap:
    """``/sitemap.xml`` lists ``/a`` (changefreq hourly) and ``/b`` (yearly, and a
    lastmod a test sets)."""

    def __init__(self) -> None:
        self.b_changed = "2020-01-01"
        self.hits: Counter[str] = Counter()
        self.bodies = {"/a": "<html><b>x</b></html>", "/b": "<html><b>x</b></html>"}
        self.freq = {"/a": "hourly", "/b": "yearly"}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="")
        self.hits[request.path] += 1
        if request.path == "/sitemap.xml":
            base = f"http://{request.host}"
            xml = (
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
                f"<url><loc>{base}/a</loc><changefreq>{self.freq['/a']}</changefreq></url>"
                f"<url><loc>{base}/b</loc><changefreq>{self.freq['/b']}</changefreq>"
                f"<lastmod>{self.b_changed}</lastmod></url></urlset>"
            )
            return web.Response(text=xml, content_type="application/xml")
        return web.Response(text=self.bodies[request.path], content_type="text/html")


def test_a_sitemaps_changefreq_is_the_first_guess_and_a_newer_lastmod_makes_a_page_due(
    any_db_url: str,
) -> None:
    site = Sitemap()
    clock = ManualClock()
    store = open_store(any_db_url, clock=clock, create=True)
    spider = Mapped()

    def run() -> None:
        crawler = Crawler(spider, store, store_process=False, handle_signals=False)
        assert not aio.run(crawler.run()).interrupted

    try:
        with AppThread(site.app()) as served:
            spider.sitemap_urls = [f"{served.url}/sitemap.xml"]
            run()
            assert site.hits == {"/sitemap.xml": 1, "/a": 1, "/b": 1}
            # the sitemap (no guess: a new page) is due first, after revisit_min; then /a
            # (hourly) after an hour; /b (yearly) after a year
            assert store.begin_pass("mapped").wait == pytest.approx(Mapped.revisit_min)
            clock.advance(3600)  # the sitemap and /a are due, /b is not
            assert store.recrawl("mapped", due=True).requeued == 2
            site.b_changed = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(clock.now + 1))
            run()
            assert site.hits == {"/sitemap.xml": 2, "/a": 2, "/b": 1}
            # the sitemap said /b changed after it was fetched: due at once
            assert store.recrawl("mapped", due=True).requeued == 1
            run()
            assert site.hits["/b"] == 2
    finally:
        store.close()


@pytest.mark.parametrize("often", ["/a", "/b"])
def test_a_record_two_pages_list_stays_while_a_pass_fetches_only_the_one_that_dropped_it(
    any_db_url: str, often: str
) -> None:
    """x is on /a and /b, one of them hourly, the other yearly (the page that yielded x
    last, /b, is either). The pass an hour on fetches the hourly one alone, which dropped
    x: x stays (the other lists it). Once the other is fetched and has dropped it too, it
    is gone."""
    site = Sitemap()
    rarely = "/a" if often == "/b" else "/b"
    site.freq = {often: "hourly", rarely: "yearly"}
    clock = ManualClock()
    store = open_store(any_db_url, clock=clock, create=True)
    spider = Listed()

    def run() -> list[tuple[str, int, float | None]]:
        crawler = Crawler(spider, store, store_process=False, handle_signals=False)
        assert not aio.run(crawler.run()).interrupted
        return [(r.key, r.version, r.gone_at) for r in store.iter_records("listed", since=0)]

    try:
        with AppThread(site.app()) as served:
            spider.sitemap_urls = [f"{served.url}/sitemap.xml"]
            assert run() == [("x", 1, None)]
            clock.advance(3600)
            site.bodies[often] = "<html>sold out</html>"
            assert store.recrawl("listed", due=True).requeued == 2  # the sitemap and one
            assert run() == [("x", 1, None)]
            assert site.hits == {"/sitemap.xml": 2, often: 2, rarely: 1}
            site.bodies[rarely] = "<html>sold out</html>"
            clock.advance(Listed.revisit_max)  # every page due
            store.recrawl("listed", due=True)
            [(_, version, gone_at)] = run()
            assert site.hits[rarely] == 2 and version == 2 and gone_at is not None
    finally:
        store.close()


def test_the_python_api_keeps_a_crawl_running_and_bad_schedules_are_refused(
    db_url: str,
) -> None:
    site = Changing()
    with AppThread(site.app()) as served:
        result = crashsafe.crawl(
            Pages, db=db_url, start_urls=[f"{served.url}/"], continuous=True, passes=2,
            revisit_min=0.2, revisit_max=0.5,
        )  # fmt: skip
    assert not result.interrupted and result.stats.done == 3
    assert sum(site.hits.values()) > 3  # pass 2 fetched again
    store = open_store(db_url)
    try:
        assert [f.number for f in store.pass_figures("changing")] == [2, 1]
    finally:
        store.close()
    for args, error in (
        (["--continuous", "--every", "1h"], "--continuous and --every: choose one"),
        (["--passes", "2"], "--passes needs --continuous or --every"),
        (["--every", "0"], "--every '0': give a duration of 1s or more"),
        (["--every", "soon"], "--every 'soon': give a duration"),
    ):
        refused = run_cli("crawl", SPIDER, "--db", db_url, *args)
        assert refused.returncode == 1 and error in refused.stderr, refused.stderr
    bad = run_cli("crawl", SPIDER, "--db", db_url, "--continuous", "-s", "revisit_min=2d")
    assert bad.returncode == 1 and "revisit_max (6000 s) is shorter than revisit_min" in bad.stderr


def test_a_run_counts_only_the_passes_that_end_while_it_runs(db_url: str) -> None:
    """A complete crawl whose passes have no figures (made by an older version): a
    `--passes 1` run still runs a pass of its own, then stops."""
    site = Changing()
    with AppThread(site.app()) as served:
        start = ["--start-url", f"{served.url}/", "-s", "revisit_min=0.2s",
                 "-s", "revisit_max=0.5s"]  # fmt: skip
        assert run_cli("crawl", SPIDER, "--db", db_url, *start).returncode == 0
        assert run_cli("recrawl", "--db", db_url).returncode == 0
        assert run_cli("crawl", SPIDER, "--db", db_url, *start).returncode == 0
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db:
            db.execute("DELETE FROM pass_figures")
            db.commit()
        hits = sum(site.hits.values())
        done = run_cli(
            "crawl", SPIDER, "--db", db_url, *start, "--continuous", "--passes", "1",
            "--no-progress",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pass 3 begins" in done.stderr and "pass 4 begins" not in done.stderr
    assert hits < sum(site.hits.values()) <= hits + 3  # a pass of its own: the pages due


def test_a_waiting_worker_joins_a_pass_begun_elsewhere_with_its_validators(
    db_url: str,
) -> None:
    site = Changing()
    with AppThread(site.app()) as served:
        args = ["crawl", SPIDER, "--db", db_url, "--start-url", f"{served.url}/",
                "--continuous", "--passes", "2", "-s", "revisit_min=1h"]  # fmt: skip
        with reaped(start_cli(*args)) as worker:
            assert worker.stderr is not None
            # pass 1 ended, and what it waits for is said (every page due in an hour)
            seen = wait_for_line(worker.stderr, "changing: pass 2 begins when it is due", 60)
            assert "pass 1: 3 pages fetched" in seen
            begun = run_cli("recrawl", "--db", db_url)  # pass 2, begun by someone else
            assert begun.returncode == 0, begun.stderr
            _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert site.hits["/never"] == 2 and site.not_modified == 1  # asked with its ETag
    assert "pass 2: 3 pages fetched (1 not modified, 1 unchanged, 1 parsed)" in err


def test_recrawl_refuses_to_begin_a_pass_while_the_last_one_runs(db_url: str) -> None:
    site = Changing(pages=10)
    with AppThread(site.app()) as served:
        start = ["--start-url", f"{served.url}/", "--concurrency", "1"]
        cut = run_cli("crawl", SPIDER, "--db", db_url, *start, "-s", "max_pages=1")
        assert cut.returncode == 0, cut.stderr  # pages left pending: pass 1 has not ended
    refused = run_cli("recrawl", "--db", db_url)
    assert refused.returncode == 1
    assert "changing: pass 1 has not ended (pages are pending or leased)" in refused.stderr
    forced = run_cli("recrawl", "--db", db_url, "--force")
    assert forced.returncode == 0
    assert re.search(r"pass 2 begun, \d+ pages queued again", forced.stdout), forced.stdout
    assert "run the crawl again" in forced.stdout


def test_a_crawl_running_pass_after_pass_keeps_about_two_grants_a_page(db_url: str) -> None:
    """Lease grants fold into counts as each pass begins (#29 item 4): rows stay about
    two a page (the last pass's and the one before's), not one a page per pass, and the
    figures made of them still match what the server saw."""
    site = Changing(pages=20)  # 23 pages
    with AppThread(site.app()) as served:
        done = run_cli(
            "crawl", SPIDER, "--db", db_url, "--start-url", f"{served.url}/",
            "--every", "1s", "--passes", "6", "--no-progress", timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    fetched = sum(site.hits.values())
    assert fetched == 6 * 23
    assert f"this run: {fetched} requests" in done.stdout + done.stderr
    [status] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert status["requests"] == fetched and status["repeated"] == 0
    with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db:
        [(rows,)] = db.execute("SELECT count(*) FROM lease_grants").fetchall()
    assert rows <= 2 * 23  # (6 * 23 kept one by one)


def every_second(
    handle: Callable[[web.Request], Awaitable[web.Response]], db_url: str, passes: int
) -> None:
    """`crawl --every 1s --passes N` of a site that ``handle`` answers; it must end."""
    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    with AppThread(app) as served:
        done = run_cli(
            "crawl", SPIDER, "--db", db_url, "--start-url", f"{served.url}/",
            "--every", "1s", "--passes", str(passes), "--no-progress", timeout=120,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_page_taken_down_is_fetched_three_passes_then_no_more(db_url: str) -> None:
    """`crawl --every`: a product page that answers 404 and that no page links any more
    is retired after its third 404 in a row, instead of costing a request every pass."""
    hits: Counter[str] = Counter()

    async def handle(request: web.Request) -> web.Response:
        hits[request.path] += 1
        if request.path == "/robots.txt":
            return web.Response(text="")
        if request.path == "/":  # another body each pass; links /gone the first time only
            links = '<a href="/kept">k</a>' + ('<a href="/gone">g</a>' if hits["/"] == 1 else "")
            return web.Response(text=f"<html><b>{hits['/']}</b>{links}</html>",
                                content_type="text/html")  # fmt: skip
        if request.path == "/kept":
            return web.Response(text="<html><b>same</b></html>", content_type="text/html")
        return web.Response(status=404)

    every_second(handle, db_url, passes=6)
    assert (hits["/"], hits["/kept"], hits["/gone"]) == (6, 6, 3)
    status = run_cli("status", "--db", db_url).stdout
    again = run_cli("recrawl", "--db", db_url)
    refused = run_cli("recrawl", "--db", db_url, "--retired")  # pass 7 runs: nothing changes
    still = json.loads(run_cli("status", "--db", db_url, "--json").stdout)[0]
    forced = run_cli("recrawl", "--db", db_url, "--retired", "--force")
    assert "(1 retired: gone three visits in a row)" in status
    assert "1 page not queued: gone (404, 410) at the last three visits" in again.stdout
    assert "pass 7 begun, 2 pages queued again" in again.stdout
    assert refused.returncode != 0 and "has not ended" in refused.stderr
    assert "retired page" not in refused.stdout and still["effects"]["retired"] == 1
    assert "1 retired page due again." in forced.stdout, forced.stderr
    assert "pass 8 begun, 1 pages queued again" in forced.stdout  # (the others: pass 7)


def test_a_site_down_for_three_passes_comes_back_whole(db_url: str) -> None:
    """An outage answering 404 everywhere for three passes retires the pages the start
    URL links (a start URL never retires); once the site is back its start page, parsed
    again, links them and the next pass fetches them; the run ends after its passes."""
    hits: Counter[str] = Counter()

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="")
        hits[request.path] += 1
        if 2 <= hits[request.path] <= 4:  # the outage: each page's 2nd to 4th request
            return web.Response(status=404)
        body = f"<b>{hits[request.path]}</b>"
        if request.path == "/":
            body += '<a href="/a">a</a><a href="/b">b</a>'
        return web.Response(text=f"<html>{body}</html>", content_type="text/html")

    every_second(handle, db_url, passes=7)
    # passes 1-4 all; 5 the start page alone (it links them again); 6 and 7 all
    assert (hits["/"], hits["/a"], hits["/b"]) == (7, 6, 6)
    [status] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert status["effects"]["retired"] == 0
