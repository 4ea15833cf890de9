"""`crawl --metrics-port P` (#27 item 3): each worker's own counters, on 127.0.0.1:P, P+1...
Counted while the crawl stands paused, they agree with the site and with the store."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Callable

from crashsafe.demo.shop import ShopThread
from tests.console.helpers import parse_metrics, total
from tests.helpers import get_json, reaped, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args
from tests.integration.test_steering_cli import status


def two_free_ports() -> int:
    """A port P with P+1 free too (looked for a bounded number of times)."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return int(port)
    raise AssertionError("no two free ports side by side")


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        return parse_metrics(resp.read().decode())


def test_each_worker_counts_its_requests_and_commits(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=10, per_listing=20, latency_ms=200)  # 210 pages: 10 s at least
    port = two_free_ports()
    args = crawl_args(site, db_url, "--workers", "2", "--concurrency", "2")
    with reaped(start_cli(*args, "--metrics-port", str(port))) as crawl:
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 8)
        assert run_cli("pause", "--db", db_url).returncode == 0
        wait_for(lambda: status(db_url)["leased"] == 0)
        one, two = scrape(port), scrape(port + 1)
        requests = total(one, "crashsafe_requests_total") + total(two, "crashsafe_requests_total")
        assert requests == get_json(f"{site.url}/stats")["requests"]  # every page request
        assert one['crashsafe_requests_total{crawl="demo-shop",status_class="2xx"}'] > 0
        done = total(one, 'crashsafe_pages_committed_total{crawl="demo-shop",outcome="done"}')
        done += total(two, 'crashsafe_pages_committed_total{crawl="demo-shop",outcome="done"}')
        assert done == status(db_url)["done"]
        commits = one['crashsafe_commit_seconds_count{crawl="demo-shop"}']
        assert commits > 0 and one['crashsafe_commit_seconds_sum{crawl="demo-shop"}'] > 0
        # only to requests addressed to it (a page elsewhere, through DNS rebinding: 421)
        rebound = urllib.request.Request(
            f"http://127.0.0.1:{port}/metrics", headers={"Host": f"attacker.example:{port}"}
        )
        try:
            urllib.request.urlopen(rebound, timeout=10)
            raise AssertionError("answered a request addressed to another name")
        except urllib.error.HTTPError as exc:
            assert exc.code == 421
        assert run_cli("resume", "--db", db_url).returncode == 0
        _, err = crawl.communicate(timeout=120)
        assert crawl.returncode == 0, err


def test_a_metrics_port_in_use_is_said(shop: Callable[..., ShopThread], db_url: str) -> None:
    site = shop(listings=1, per_listing=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run_cli(*crawl_args(site, db_url), "--metrics-port", str(port))
    assert out.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in out.stderr
