"""A worker paused past its lease (SIGSTOP, or a parse that blocks the event loop) comes
back and tries to commit: the store refuses it whole, so no record ever holds older
content than the newest committed fetch and no URL is committed done twice (DESIGN rule 4).

The site's pages change on every fetch (each answer carries a new serial number), so an
overwrite by the stale worker would show as a record at version 2, or one whose serial is
not the one served to the worker whose commit counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from crashsafe import open_store
from crashsafe.demo.server import AppThread
from tests.helpers import start_cli, wait_for

PAGES = 12
LEASE = "2"  # seconds: the paused worker's leases lapse while it is stopped

SPIDER = """
import os, time
from pathlib import Path
from crashsafe import Record, Spider

class Changing(Spider):
    name = "changing"

    def parse(self, page):
        if page.url.endswith("/start"):
            yield from page.follow_all(css="a::attr(href)")
            return
        block = os.environ.get("BLOCK_IN_PARSE")
        if block and page.url.endswith("/p/3"):
            # Block the event loop (as a slow, synchronous parse does) until told to go on.
            Path(block + ".blocked").touch()
            deadline = time.monotonic() + 60
            while not Path(block + ".go").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        yield Record(page.url.rsplit("/", 1)[1], {"serial": page.css(".v::text").get()})
"""


class ChangingSite:
    """/p/N answers a new serial on every fetch; requests from the user agent ``A`` wait
    at the gate while it is closed. ``served[path]`` lists ``(agent, serial)``."""

    def __init__(self) -> None:
        self.serials = itertools.count(1)
        self.served: dict[str, list[tuple[str, str]]] = {}
        self.gate_open = threading.Event()
        self.held = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.Response:
        if request.path == "/start":
            links = "".join(f'<a href="/p/{n}">p</a>' for n in range(PAGES))
            return web.Response(text=f"<html>{links}</html>", content_type="text/html")
        if not request.path.startswith("/p/"):
            return web.Response(status=404)
        agent = request.headers.get("User-Agent", "")
        if agent == "A":
            self.held += 1
            deadline = time.monotonic() + 30  # bounded, whatever the test does
            while not self.gate_open.is_set() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        serial = str(next(self.serials))
        self.served.setdefault(request.path, []).append((agent, serial))
        return web.Response(text=f"<html><b class=v>{serial}</b></html>", content_type="text/html")


@pytest.fixture
def site() -> Iterator[tuple[ChangingSite, str]]:
    s = ChangingSite()
    with AppThread(s.app()) as thread:
        yield s, thread.url
    s.gate_open.set()


def worker(tmp_path: Path, base: str, db_url: str, agent: str) -> subprocess.Popen[str]:
    spider = tmp_path / "changing.py"
    spider.write_text(SPIDER)
    return start_cli(
        "crawl", f"{spider}:Changing", "--db", db_url, "--start-url", f"{base}/start",
        "--lease-seconds", LEASE, "--concurrency", "4", "--no-progress",
        "--set", f"user_agent={agent}", "--set", "obey_robots=false",
    )  # fmt: skip


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"worker did not finish: {err}") from None
    assert proc.returncode == 0, err
    return err


def check_newest_fetch_kept(site: ChangingSite, db_url: str) -> int:
    """Every record holds what the worker whose commit counted was served; no URL done
    twice. Returns the stale commits refused."""
    store = open_store(db_url)
    try:
        stats = store.stats("changing")
        records = {r.key: r for r in store.iter_records("changing")}
    finally:
        store.close()
    assert stats.done == PAGES + 1 and stats.pending == 0 and stats.leased == 0
    assert stats.outcomes["done"] == PAGES + 1  # no URL committed done twice
    assert len(records) == PAGES
    for key, record in records.items():
        assert record.version == 1, f"{key} was overwritten"
        # B only ever fetched a URL after A's lease on it had lapsed: where both fetched
        # it, B's fetch is the one that may count, A's commit must have been refused.
        served = site.served[f"/p/{key}"]
        counted = "B" if any(agent == "B" for agent, _ in served) else "A"
        assert record.data["serial"] == next(s for a, s in reversed(served) if a == counted)
    return stats.stale


def test_a_worker_stopped_past_its_lease_cannot_overwrite(
    site: tuple[ChangingSite, str], any_db_url: str, tmp_path: Path
) -> None:
    server, base = site
    a = worker(tmp_path, base, any_db_url, "A")
    try:
        wait_for(lambda: server.held >= 4)  # A has requests in flight, held at the gate
        os.kill(a.pid, signal.SIGSTOP)
        server.gate_open.set()  # A's answers wait in its socket while it is stopped
        b = worker(tmp_path, base, any_db_url, "B")
        finish(b)  # B takes A's lapsed leases over and completes the crawl
        os.kill(a.pid, signal.SIGCONT)
        finish(a)  # A wakes up, finds its leases gone: nothing of its pages is written
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(a.pid, signal.SIGCONT)
        if a.poll() is None:
            a.kill()
            a.wait()
    held_by_a = [p for p, served in server.served.items() if any(x == "A" for x, _ in served)]
    assert len(held_by_a) >= 4
    check_newest_fetch_kept(server, any_db_url)


def test_a_parse_that_blocks_past_its_lease_cannot_overwrite(
    site: tuple[ChangingSite, str], any_db_url: str, tmp_path: Path
) -> None:
    server, base = site
    server.gate_open.set()
    marker = str(tmp_path / "parse")
    os.environ["BLOCK_IN_PARSE"] = marker
    try:
        a = worker(tmp_path, base, any_db_url, "A")
    finally:
        del os.environ["BLOCK_IN_PARSE"]
    try:
        wait_for(lambda: Path(marker + ".blocked").exists())
        b = worker(tmp_path, base, any_db_url, "B")
        finish(b)
        Path(marker + ".go").touch()
        finish(a)
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()
    # A's commit of /p/3 (and of any page it held) was refused, not written over B's
    assert check_newest_fetch_kept(server, any_db_url) >= 1
