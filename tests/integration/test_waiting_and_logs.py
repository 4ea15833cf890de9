"""A crawl says what it is doing and what it waits for (issues #22 item 3, #23 items 1-2):
a host that is down, a port that does not speak TLS, a run under a service manager."""

from __future__ import annotations

import json
import signal
import socket
from collections.abc import Callable
from pathlib import Path

from crashsafe.demo.shop import ShopThread
from tests.helpers import reaped, run_cli, start_cli, wait_for_line


def unused_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then closed: refused from now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def crawl(db: str, *starts: str, sets: tuple[str, ...] = (), extra: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    args = ["crawl", "crashsafe.demo.spider:DemoShop", "--db", db, "--no-progress"]
    args += [f"--start-url={u}" for u in starts]
    args += [f"--set={s}" for s in sets]
    return run_cli(*args, *extra)


def test_a_host_that_is_down_is_named_and_the_run_ends_with_status_5(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=2, per_listing=3)
    down = f"http://127.0.0.1:{unused_port()}"
    # the shop's pages are all fetched; then all that is left waits on the other origin
    out = tmp_path / "items.jsonl"
    sets = ("unreachable_timeout=3", "log_interval=1")
    result = crawl(
        db_url, f"{site.url}/list/0", f"{down}/list/0", sets=sets, extra=("-o", str(out))
    )
    assert result.returncode == 5, result.stderr
    # -o is written all the same (a cron line with one site down gets the rest), saying so
    assert len(out.read_text().splitlines()) == 6
    assert (
        "(not the items of the pages that wait, below: the crawl is not complete)" in result.stderr
    )
    assert "8 pages done" in result.stderr  # 2 listings and 6 products
    waits = f"1 page waits for robots.txt of {down}: connection refused"
    assert waits in result.stderr
    assert "Stopped waiting after" in result.stderr and "(exit status 5)" in result.stderr
    # off a terminal, a progress line at the interval says it too (not every one: at the
    # moment an origin's hold ends, before its next try holds it again, nothing waits)
    logged = [x for x in result.stderr.splitlines() if "INFO crashsafe.crawl: demo-shop:" in x]
    line = f"1 page waits for robots.txt of {down} (connection refused"
    assert any(line in x for x in logged), logged
    status = run_cli("status", "--db", db_url)
    assert f"waiting   {waits}" in status.stdout
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["pending"] == 1 and row["failed"] == 0  # waits without an attempt spent
    [waiting] = row["waiting"]
    assert (waiting["origin"], waiting["pages"]) == (down, 1)
    assert waiting["why"].startswith("connection refused") and waiting["next_try"]


def test_a_log_says_at_once_that_the_crawl_started_and_what_it_waits_for(db_url: str) -> None:
    # Under a service manager (stderr a pipe) with a long log interval: the first line
    # and the one naming the origin that holds pages back come at once, not after it.
    down = f"http://127.0.0.1:{unused_port()}"
    args = ["crawl", "crashsafe.demo.spider:DemoShop", "--db", db_url, "--no-progress",
            f"--start-url={down}/list/0", "--set=log_interval=600"]  # fmt: skip
    with reaped(start_cli(*args)) as proc:
        assert proc.stderr is not None
        seen = wait_for_line(proc.stderr, f"1 page waits for robots.txt of {down} (connection")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    lines = [x for x in seen.splitlines() if "INFO crashsafe.crawl: demo-shop: " in x]
    assert "demo-shop: 0/1 pages" in lines[0]  # at the start (what waits, maybe, already)
    assert "1 page waits for robots.txt" in lines[-1]  # at once, not after 600 s


def test_a_port_that_does_not_speak_tls_fails_its_pages_with_the_tls_error(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=1, per_listing=1)
    https = site.url.replace("http://", "https://")
    sets = ("max_attempts=2", "backoff_base=0.05", "unreachable_timeout=30")
    result = crawl(db_url, f"{https}/list/0", sets=sets)
    # not a wait of 30 days for robots.txt: each try counts, then the dead letter
    assert result.returncode == 1, result.stderr
    assert "no page was crawled while 1 URL(s) failed" in result.stderr
    failed = run_cli("failed", "--db", db_url)
    assert "TLS handshake failed" in failed.stdout and "wrong version number" in failed.stdout
    assert "does that port speak plain HTTP?" in failed.stdout
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["failed"] == 1 and row["waiting"] == []


SPIDER = """
from crashsafe.demo.spider import DemoShop

class Logged(DemoShop):
    name = "logged"

    def parse(self, page):
        self.logger.info("parsing %s", page.url)
        yield from super().parse(page)
"""


def test_json_log_lines_per_request_at_debug_and_the_spiders_logger(
    shop: Callable[..., ShopThread], tmp_path: Path, db_url: str
) -> None:
    site = shop(listings=1, per_listing=2)
    spider = tmp_path / "logged.py"
    spider.write_text(SPIDER)
    result = run_cli("crawl", str(spider), "--db", db_url, "--start-url", f"{site.url}/list/0",
                     "--no-progress", "--log-format", "json", "-L", "DEBUG")  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [json.loads(x) for x in result.stderr.splitlines()]  # every line is JSON
    requests = [x for x in lines if x["logger"] == "crashsafe.crawl.requests"]
    assert {(x["method"], x["status"]) for x in requests} == {("GET", 200)}
    assert {x["url"] for x in requests} >= {f"{site.url}/list/0"}
    parsed = [x for x in lines if x["logger"] == "logged"]
    assert len(parsed) == 3 and parsed[0]["message"].startswith("parsing http://")
    assert any("3 pages done" in x["message"] for x in lines)  # the summary too
    again = tmp_path / "again.db"
    quiet = run_cli("crawl", str(spider), "--db", f"sqlite:///{again}", "--loglevel", "WARNING",
                    "--start-url", f"{site.url}/list/0", "--no-progress")  # fmt: skip
    assert "parsing" not in quiet.stderr and quiet.returncode == 0
