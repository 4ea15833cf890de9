"""The Scrapy adapter: an unmodified Scrapy spider (shop_spider.py), run by `scrapy
runspider` with and without crashsafe's settings, on the demo shop."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from crashsafe.demo.shop import ShopThread
from crashsafe.store import open_store
from tests.helpers import cli_env, exported, get_json, reaped, run_cli, wait_for

if os.environ.get("CI") != "true":  # in CI the adapter is tested, never skipped
    pytest.importorskip("scrapy", reason="the Scrapy adapter needs crashsafe[scrapy]")

SPIDER = str(Path(__file__).with_name("shop_spider.py"))
ADAPTER = [
    "-s", "SCHEDULER=crashsafe.contrib.scrapy.CrashsafeScheduler",
    "-s", 'SPIDER_MIDDLEWARES={"crashsafe.contrib.scrapy.CrashsafeSpiderMiddleware": 60}',
    "-s", 'DOWNLOADER_MIDDLEWARES={"crashsafe.contrib.scrapy.CrashsafeDownloaderMiddleware": 10}',
    "-s", "CRASHSAFE_ITEM_KEY=sku",
]  # fmt: skip


def scrapy_cmd(site: ShopThread, *extra: str) -> list[str]:
    return [sys.executable, "-m", "scrapy", "runspider", SPIDER,
            "-a", f"start={site.url}/list/0", "-s", "LOG_LEVEL=WARNING", *extra]  # fmt: skip


def env(log: Path) -> dict[str, str]:
    return {**cli_env(), "PIPELINE_LOG": str(log)}


def run(cmd: list[str], log: Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env(log), text=True, capture_output=True, timeout=180,
                          cwd=cwd)  # fmt: skip


def pipeline_items(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def stored(db_url: str) -> dict[str, Any]:
    return {r["key"]: r["data"] for r in exported(db_url)}


def truth(site: ShopThread) -> dict[str, dict[str, str]]:
    return {k: {"name": v["name"], "price": v["price"]}
            for k, v in get_json(f"{site.url}/catalogue").items()}  # fmt: skip


def test_the_same_items_with_and_without_the_adapter(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=4, per_listing=5, error_rate=0.2)
    plain = run(scrapy_cmd(site), tmp_path / "plain.jsonl")
    assert plain.returncode == 0, plain.stderr
    adapted = run(scrapy_cmd(site, *ADAPTER, "-s", f"CRASHSAFE_DB={db_url}"), tmp_path / "a.jsonl")
    assert adapted.returncode == 0, adapted.stderr
    by_sku = {i["sku"]: i for i in pipeline_items(tmp_path / "plain.jsonl")}
    assert len(by_sku) == 20
    assert stored(db_url) == by_sku  # meta and cb_kwargs came through the store too
    assert {i["sku"]: i for i in pipeline_items(tmp_path / "a.jsonl")} == by_sku
    assert {k: {"name": v["name"], "price": v["price"]} for k, v in by_sku.items()} == truth(site)
    # Run again: the crawl is complete, nothing is fetched or stored again.
    before = get_json(f"{site.url}/stats")["requests"]
    again = run(scrapy_cmd(site, *ADAPTER, "-s", f"CRASHSAFE_DB={db_url}"), tmp_path / "b.jsonl")
    assert again.returncode == 0, again.stderr
    assert get_json(f"{site.url}/stats")["requests"] == before
    assert pipeline_items(tmp_path / "b.jsonl") == []


@pytest.mark.slow
def test_ten_sigkills_then_exactly_one_record_per_item(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=10, per_listing=20, latency_ms=10, error_rate=0.1)
    cmd = scrapy_cmd(site, *ADAPTER, "-s", f"CRASHSAFE_DB={db_url}")
    log = tmp_path / "pipeline.jsonl"
    rng = random.Random(20261202)
    kills = 0
    for _ in range(10):
        before = get_json(f"{site.url}/stats")["requests"]
        wanted = before + rng.randint(2, 25)  # killed after the n-th request of this run
        proc = subprocess.Popen(cmd, env=env(log), text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        with reaped(proc):
            wait_for(lambda w=wanted, p=proc: get_json(f"{site.url}/stats")["requests"] >= w
                     or p.poll() is not None, timeout=120)  # fmt: skip
            proc.send_signal(signal.SIGKILL)
            code = proc.wait()
        if code != -signal.SIGKILL:
            break  # it finished first
        kills += 1
    final = run(cmd, log)
    assert final.returncode == 0, final.stderr
    assert {k: {"name": v["name"], "price": v["price"]} for k, v in stored(db_url).items()} == (
        truth(site)
    )
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert (row["failed"], row["pending"], row["leased"], row["records"]) == (0, 0, 0, 200)
    # Pipelines see every item at least once; the store holds each exactly once.
    assert {i["sku"] for i in pipeline_items(log)} == set(truth(site))
    print(f"{kills} kills landed; server requests {get_json(f'{site.url}/stats')}",
          file=sys.stderr)  # fmt: skip
    assert kills >= 1 or os.environ.get("CI") != "true"


def test_what_never_reaches_a_callback_is_recorded(db_url: str, tmp_path: Path) -> None:
    from aiohttp import web

    from crashsafe.demo.server import AppThread

    async def page(request: web.Request) -> web.Response:
        status = {"/missing": 404, "/broken": 500}.get(request.path, 200)
        return web.Response(text="<p>x</p>", status=status, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    with AppThread(app) as site:
        dead = f"http://127.0.0.1:{free_port()}/"
        spider = str(Path(__file__).with_name("odd_spider.py"))
        cmd = [sys.executable, "-m", "scrapy", "runspider", spider, "-a", f"start={site.url}/",
               "-a", f"dead={dead}", "-s", "LOG_LEVEL=ERROR", *ADAPTER,
               "-s", f"CRASHSAFE_DB={db_url}"]  # fmt: skip
        done = run(cmd, tmp_path / "p.jsonl")
    assert done.returncode == 0, done.stderr
    assert "the spider's own bug" in done.stderr  # logged, as Scrapy would
    assert list(stored(db_url)) == ["fine"]
    store = open_store(db_url, create=False, readonly=True)
    errors = {f.url.split("#")[0]: f.error or "" for f in store.failed()}
    store.close()
    assert "ValueError: the spider's own bug" in errors[f"{site.url}/raises"]
    assert errors[f"{site.url}/broken"] == "HTTP 500"
    assert "ConnectionRefusedError" in errors[dead] or "refused" in errors[dead].lower()
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    # start, /missing (404: done), /fine; the offsite link is not stored, but counted
    assert (row["done"], row["failed"], row["pending"], row["leased"]) == (3, 3, 0, 0)
    assert row["links_offsite"] == 1


def leased(db_url: str, crawl: str) -> int:
    """Pages leased in ``crawl`` now (0 before a crawler has created the store)."""
    from crashsafe.errors import CrashsafeError

    try:
        store = open_store(db_url, create=False, readonly=True)
    except CrashsafeError:  # not there yet, or its tables not yet committed
        return 0
    try:
        return store.stats(crawl).leased
    finally:
        store.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_killtest_with_scrapy_holds_where_jobdir_does_not(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    result = run_cli(
        "killtest", "--scraper", "scrapy", "--runs", "1", "--kills", "3",
        "--listings", "10", "--json", str(out), timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "scrapy + crashsafe: holds" in result.stdout
    figures = json.loads(out.read_text())
    [run] = figures["runs"]
    assert figures["options"]["labels"] == {
        "naive": "scrapy JOBDIR",
        "crashsafe": "scrapy + crashsafe",
    }
    adapter = run["crashsafe"]
    assert (adapter["rows"], adapter["distinct"], adapter["missing"]) == (200, 200, 0)
    assert adapter["kills_landed"] >= 1 and adapter["violations"] == []


def test_feeds_are_written_from_the_store_each_item_once(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    """-o under the adapter: after kills, the feed of the run that completes the crawl
    holds every item once (Scrapy's own exporter would hold only that run's items)."""
    from crashsafe.contrib.scrapy import SETTINGS

    site = shop(listings=4, per_listing=10, latency_ms=10)
    feed = tmp_path / "items.csv"
    extensions = json.dumps(SETTINGS["EXTENSIONS"])
    cmd = scrapy_cmd(site, *ADAPTER, "-s", f"EXTENSIONS={extensions}",
                     "-s", f"CRASHSAFE_DB={db_url}", "-o", str(feed))  # fmt: skip
    log = tmp_path / "p.jsonl"
    with reaped(subprocess.Popen(cmd, env=env(log), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)) as proc:  # fmt: skip
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 15, timeout=120)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not feed.exists()  # killed: nothing written, nothing half-written
    done = run(cmd, log)
    assert done.returncode == 0, done.stderr
    import csv

    rows = list(csv.DictReader(feed.open()))
    assert sorted(r["sku"] for r in rows) == sorted(truth(site))
    assert {r["sku"]: r["listing"] for r in rows} == {
        k: v["listing"] for k, v in stored(db_url).items()
    }


def test_two_scrapy_processes_share_one_postgresql_frontier(
    shop: Callable[..., ShopThread], pg_url: str, tmp_path: Path
) -> None:
    # Two pages at a time each, 100 ms a page: the crawl lasts 10 s or more, and the second
    # process starts once the first is under way, so both have work.
    site = shop(listings=10, per_listing=20, latency_ms=100)
    log = tmp_path / "p.jsonl"
    procs = []
    for i in (1, 2):
        cmd = scrapy_cmd(site, *ADAPTER, "-s", f"CRASHSAFE_DB={pg_url}",
                         "-s", f"USER_AGENT=w{i}", "-s", "CONCURRENT_REQUESTS=2")  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env(log), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True))  # fmt: skip
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 5, timeout=120)
    for proc in procs:
        with reaped(proc):
            _, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, err
    assert {k: {"name": v["name"], "price": v["price"]} for k, v in stored(pg_url).items()} == (
        truth(site)
    )
    server = get_json(f"{site.url}/stats")
    assert server["repeated"] == 0  # leases kept the two from fetching a page twice
    agents = {agent for _, _, agent in get_json(f"{site.url}/log?since=0")}
    assert {"w1", "w2"} <= agents  # both did part of the work


def test_redirects_cookies_errbacks_and_closespider_as_in_scrapy(
    db_url: str, tmp_path: Path
) -> None:
    from aiohttp import web

    from crashsafe.demo.server import AppThread

    async def page(request: web.Request) -> web.StreamResponse:
        if request.path == "/moved":
            raise web.HTTPFound("/item/moved")
        if request.path == "/login":
            response = web.Response(text="<p>in</p>", content_type="text/html")
            response.set_cookie("session", "s1")
            return response
        if request.path == "/private":
            return web.Response(text=request.cookies.get("session", "none"))
        return web.Response(text="here", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    spider = str(Path(__file__).with_name("habits_spider.py"))
    with AppThread(app) as site:

        def cmd(stop: str) -> list[str]:
            return [sys.executable, "-m", "scrapy", "runspider", spider,
                    "-a", f"start={site.url}/", "-a", f"dead=http://127.0.0.1:{free_port()}/x",
                    "-a", f"stop={stop}", "-s", "LOG_LEVEL=INFO", *ADAPTER,
                    "-s", f"CRASHSAFE_DB={db_url}"]  # fmt: skip

        stopped = run(cmd("yes"), tmp_path / "p.jsonl")  # CloseSpider in the start page
        assert stopped.returncode == 0, stopped.stderr
        assert "'finish_reason': 'asked to stop'" in stopped.stderr
        assert stored(db_url) == {}  # the start page's output was not committed...
        done = run(cmd("no"), tmp_path / "p.jsonl")  # ...so the next run does it again
        assert done.returncode == 0, done.stderr
    items = stored(db_url)
    assert items["moved"] == {"sku": "moved", "text": "here"}  # followed, as in Scrapy
    assert items["private"] == {"sku": "private", "text": "s1"}  # the cookie was kept
    piped = pipeline_items(tmp_path / "p.jsonl")
    assert any(i["sku"] == "errback" and "Refused" in i["text"] for i in piped)  # it ran
    assert "errback" not in items  # its request failed: what the errback made is not stored


def test_requests_scrapy_ends_without_telling_end_their_pages(db_url: str, tmp_path: Path) -> None:
    """Scrapy's offsite filter drops a redirect off the allowed domains on its way to the
    scheduler, and a middleware's IgnoreRequest in process_response (a redirect loop, a
    body too large once gunzipped) reaches no middleware of crashsafe's: each page's lease
    was held and the run hung on it. Now the first is done, saying so, the others fail."""
    import gzip
    import sqlite3

    from aiohttp import web

    from crashsafe.contrib.scrapy.scheduler import LOST
    from crashsafe.demo.server import AppThread

    async def page(request: web.Request) -> web.StreamResponse:
        if request.path == "/away":
            raise web.HTTPFound("http://other.example/r")
        if request.path in ("/loop", "/loop2"):
            raise web.HTTPFound("/loop2" if request.path == "/loop" else "/loop")
        if request.path == "/bomb":
            body = gzip.compress(b"0" * 200_000)
            return web.Response(body=body, headers={"Content-Encoding": "gzip"})
        if request.path == "/doc.pdf":
            return web.Response(body=b"%PDF-1.4", content_type="application/pdf")
        if request.path == "/e500":
            return web.Response(text="<p>down</p>", status=500, content_type="text/html")
        return web.Response(text="<p>here</p>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    spider = str(Path(__file__).with_name("offsite_redirect_spider.py"))
    with AppThread(app) as site:
        cmd = [sys.executable, "-m", "scrapy", "runspider", spider, "-a", f"start={site.url}/",
               "-s", "LOG_LEVEL=INFO", *ADAPTER, "-s", f"CRASHSAFE_DB={db_url}",
               "-s", "REDIRECT_MAX_TIMES=3", "-s", "DOWNLOAD_MAXSIZE=10000",
               "-s", 'DOWNLOADER_MIDDLEWARES={"offsite_redirect_spider.SkipNonHtml": 500, '
                     '"crashsafe.contrib.scrapy.CrashsafeDownloaderMiddleware": 10}']  # fmt: skip
        runs = [run(cmd, tmp_path / "p.jsonl") for _ in range(2)]  # (the second: no work)
    for done in runs:
        assert done.returncode == 0, done.stderr
        assert "'finish_reason': 'finished'" in done.stderr
    assert set(stored(db_url)) == {"start", "here", "e500-errback"}
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as db:
        query = "SELECT url, state, last_error, http_status FROM frontier"
        rows = {url.split("#")[0].rsplit("/", 1)[1]: rest for url, *rest in db.execute(query)}
    assert rows["away"] == [
        "done",
        "redirect to http://other.example/r not followed (dropped by Scrapy)",
        302,
    ]
    # Scrapy's own IgnoreRequests fail their pages; one of the spider's skips it (as one
    # in process_request does), and its errback still runs; another exception fails it
    assert rows["loop"] == ["failed", "IgnoreRequest: max redirections reached", None]
    assert rows["bomb"][0] == "failed" and "exceeded DOWNLOAD_MAXSIZE" in rows["bomb"][1]
    assert rows["doc.pdf"] == ["done", "ignored: not HTML", None]
    # a 500 whose errback yields: done with what it yields, its error kept (a recrawl
    # keeps the page's listing: not a parse of it)
    assert rows["e500"] == ["done", "HTTP 500", 500]
    assert rows["broken-mw"] == ["failed", "ValueError: the middleware's own bug", None]
    assert runs[0].stderr.count("errback saw IgnoreRequest('not HTML')") == 1
    assert LOST not in runs[0].stderr  # each said at once, not once Scrapy ran dry
    assert rows[""][0] == rows["here"][0] == "done"
    status = run_cli("status", "--db", db_url, "--json")
    [row] = json.loads(status.stdout)
    assert row["repeated"] == 0 and row["failed"] == 3
    # offsite links: checked by Scrapy's own filter before they are stored, and counted
    assert not any("other.example/x" in url for url in rows) and row["links_offsite"] == 2
    assert "'offsite/filtered': 3" in runs[0].stderr  # (Scrapy's: 2 links, 1 redirect)


def test_a_request_with_a_copy_of_a_pages_meta_is_a_request_of_its_own(
    db_url: str, tmp_path: Path
) -> None:
    """Only what the downloader's middlewares make (a retry, a redirect, a URL rewritten:
    /rw) goes out under its page's lease. A request made with a copy of the meta once
    the page's answer reached the spider (``engine.crawl(Request(url,
    meta=response.meta))``, an errback's ``failure.request.replace()``, a captcha's
    ``get_retry_request``) went out under it too: its answer was taken for the page's
    (/p/1's items lost, /p/2's stored as /p/1's), or lost once the page had committed
    (the captcha's, /f403's), a copy dropped as offsite failed /p/1, and the errback's
    retry of a page that timed out stored nothing."""
    import asyncio

    from aiohttp import web

    from crashsafe.demo.server import AppThread

    hits: dict[str, int] = {}

    async def page(request: web.Request) -> web.StreamResponse:
        hits[request.path] = hits.get(request.path, 0) + 1
        first = hits[request.path] == 1
        if request.path == "/slow" and first:
            await asyncio.sleep(3)  # (past DOWNLOAD_TIMEOUT: the page fails)
        if request.path == "/captcha" and first:
            return web.Response(text="SOLVE-ME", content_type="text/html")
        if request.path == "/f403" and first:
            return web.Response(status=403)
        name = request.path.strip("/").replace("/", "")
        items = "".join(f'<li data-k="{name}-{n}">x</li>' for n in range(2))
        return web.Response(text=f"<ul>{items}</ul>", content_type="text/html")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", page)
    spider = str(Path(__file__).with_name("meta_copy_spider.py"))
    with AppThread(app) as site:
        cmd = [sys.executable, "-m", "scrapy", "runspider", spider, "-a", f"start={site.url}",
               "-s", "LOG_LEVEL=INFO", "-s", ADAPTER[1], "-s", ADAPTER[3],
               "-s", 'DOWNLOADER_MIDDLEWARES={"crashsafe.contrib.scrapy.CrashsafeDownloader'
               'Middleware": 10, "meta_copy_spider.Rewrite": 400}',
               "-s", "CRASHSAFE_ITEM_KEY=k", "-s", f"CRASHSAFE_DB={db_url}"]  # fmt: skip
        done = run(cmd, tmp_path / "p.jsonl", cwd=Path(__file__).parent)
    assert done.returncode == 0, done.stderr
    items = {f"{name}-{n}" for name in ("p1", "p2", "slow", "rewritten", "captcha", "f403")
             for n in range(2)}  # fmt: skip
    assert set(stored(db_url)) == items
    failed = run_cli("failed", "--db", db_url).stdout
    assert "Scrapy ended the request" not in failed  # (a lease held with nothing in flight)
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    # failed: the first /slow (timed out) and /f403 (403); the copies: rows of their own
    assert (row["failed"], row["pending"], row["leased"]) == (2, 0, 0), failed


def test_scrapys_http_cache_works_under_the_adapter(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    """A second crawl on a fresh database, from Scrapy's HTTP cache: every item stored,
    and not one request reaches the site."""
    site = shop(listings=2, per_listing=5)
    cache = ["-s", "HTTPCACHE_ENABLED=True", "-s", f"HTTPCACHE_DIR={tmp_path / 'cache'}"]
    for name in ("first", "cached"):
        db = f"sqlite:///{tmp_path / name}.db"
        before = get_json(f"{site.url}/stats")["requests"]
        done = run(scrapy_cmd(site, *ADAPTER, *cache, "-s", f"CRASHSAFE_DB={db}"),
                   tmp_path / "p.jsonl")  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert {k: {"name": v["name"], "price": v["price"]} for k, v in stored(db).items()} == (
            truth(site)
        )
    assert get_json(f"{site.url}/stats")["requests"] == before  # all from the cache


def test_a_recrawl_under_the_adapter_versions_changes_and_marks_gone(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    import dataclasses

    from crashsafe.demo.shop import discontinued, product, sku

    site = shop(listings=3, per_listing=20)
    db = f"sqlite:///{tmp_path / 's.db'}"
    cmd = [sys.executable, "-m", "crashsafe.killtest.scrapy_shop", f"{site.url}/list/0",
           "ua", "4", "crashsafe", db]  # fmt: skip
    assert subprocess.run(cmd, env=cli_env(), capture_output=True).returncode == 0
    site.shop.options = dataclasses.replace(site.shop.options, round=1)
    queued = run_cli("recrawl", "--db", db)
    assert queued.returncode == 0 and "pass 2 begun" in queued.stdout
    assert subprocess.run(cmd, env=cli_env(), capture_output=True).returncode == 0
    gone = {sku(n) for n in range(60) if discontinued(n, 1)}
    changed = {sku(n) for n in range(60) if product(n, 1) != product(n)} - gone
    assert gone and changed  # round 1 has both among 60 products
    rows = {r["key"]: r for r in exported(db, "--since", "last-pass", "--changed-only")}
    assert {k for k, r in rows.items() if "gone_at" in r} == gone
    assert {k for k, r in rows.items() if "gone_at" not in r} == changed


def test_a_missing_item_key_is_one_line_and_the_database_used_is_said(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    # (#23 item 8: Scrapy's "Engine slot not assigned" traceback followed the message)
    site = shop(listings=1, per_listing=2)
    no_key = [a for a in ADAPTER if not a.startswith("CRASHSAFE_ITEM_KEY")][:-1]
    env_db, cmdline_db = tmp_path / "env.db", tmp_path / "cmdline.db"
    cmd = [*scrapy_cmd(site, *no_key), "-s", "LOG_LEVEL=INFO"]
    broken = subprocess.run(cmd, env={**env(tmp_path / "p.jsonl"), "CRASHSAFE_DB": f"sqlite:///{env_db}"},
                            text=True, capture_output=True, timeout=120)  # fmt: skip
    assert "CRASHSAFE_ITEM_KEY is not set" in broken.stderr
    assert "Traceback" not in broken.stderr and "slot not assigned" not in broken.stderr
    # The database: -s on the command line, then the environment, then settings.py
    cmd = [*scrapy_cmd(site, *ADAPTER), "-s", "LOG_LEVEL=INFO"]
    with_env = {**env(tmp_path / "p.jsonl"), "CRASHSAFE_DB": f"sqlite:///{env_db}"}
    first = subprocess.run(cmd, env=with_env, text=True, capture_output=True, timeout=120)
    assert first.returncode == 0, first.stderr
    said = f"starting crawl 'scrapy-shop' on sqlite:///{env_db} (from the CRASHSAFE_DB environment"
    assert said in first.stderr
    again = subprocess.run([*cmd, "-s", f"CRASHSAFE_DB=sqlite:///{cmdline_db}"], env=with_env,
                           text=True, capture_output=True, timeout=120)  # fmt: skip
    assert f"on sqlite:///{cmdline_db} (from -s CRASHSAFE_DB)" in again.stderr
    resumed = subprocess.run(cmd, env=with_env, text=True, capture_output=True, timeout=120)
    assert (
        "resuming crawl 'scrapy-shop'" in resumed.stderr and "3 done, 0 pending" in resumed.stderr
    )


def test_the_database_setting_of_a_project_loses_to_the_environment() -> None:
    from scrapy.settings import Settings

    from crashsafe.contrib.scrapy.frontier import database_of

    project = Settings({"CRASHSAFE_DB": "sqlite:///project.db"}, priority="project")
    os.environ.pop("CRASHSAFE_DB", None)
    assert database_of(project) == ("sqlite:///project.db", "the CRASHSAFE_DB setting")
    try:
        os.environ["CRASHSAFE_DB"] = "sqlite:///env.db"
        assert database_of(project)[0] == "sqlite:///env.db"
        project.set("CRASHSAFE_DB", "sqlite:///cmd.db", priority="cmdline")
        assert database_of(project) == ("sqlite:///cmd.db", "-s CRASHSAFE_DB")
    finally:
        os.environ.pop("CRASHSAFE_DB", None)


def test_a_worker_that_found_nothing_to_lease_asks_again(db_url: str, tmp_path: Path) -> None:
    """A second worker starts while the first holds the only page: its claim finds
    nothing, and Scrapy's engine asks again only when something wakes it (its heartbeat is
    set to an hour in the spider). Both must end once the first has committed the page's
    links, the second having woken by itself (it hung for the heartbeat before)."""
    import threading

    from aiohttp import web

    from crashsafe.demo.server import AppThread

    gate = threading.Event()

    async def start(request: web.Request) -> web.Response:
        import asyncio

        await asyncio.get_running_loop().run_in_executor(None, gate.wait, 60)
        links = "".join(f'<a href="/item/{n}">{n}</a>' for n in range(8))
        return web.Response(text=links, content_type="text/html")

    async def item(request: web.Request) -> web.Response:
        return web.Response(text="<p>item</p>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/start", start)
    app.router.add_get("/item/{n}", item)
    spider = str(Path(__file__).with_name("idle_worker_spider.py"))
    with AppThread(app) as site:
        cmd = [sys.executable, "-m", "scrapy", "runspider", spider, "-a", f"start={site.url}/start",
               *ADAPTER, "-s", f"CRASHSAFE_DB={db_url}"]  # fmt: skip
        log = tmp_path / "p.jsonl"
        first = subprocess.Popen([*cmd, "-s", "LOG_LEVEL=INFO"], env=env(log), text=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        with reaped(first):
            # the first worker holds the start page (its server waits on the gate)
            wait_for(lambda: leased(db_url, "scrapy-idle-worker") == 1, timeout=120)
            second = subprocess.Popen([*cmd, "-s", "LOG_LEVEL=DEBUG"], env=env(log),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True)  # fmt: skip
            with reaped(second):
                assert second.stderr is not None
                said = []
                for line in second.stderr:  # its claim found nothing: the start page is held
                    said.append(line)
                    if "nothing due to lease here" in line:
                        break
                else:
                    raise AssertionError("".join(said[-30:]))
                gate.set()
                _, err = first.communicate(timeout=120)
                assert first.returncode == 0, err
                # It must wake up by itself to see the pages the first added, or the end.
                _, rest = second.communicate(timeout=120)
                assert second.returncode == 0, "".join(said[-20:]) + rest[-3000:]
    assert sorted(stored(db_url)) == [str(n) for n in range(8)]
