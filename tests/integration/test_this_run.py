"""Two crawl commands on one database: each one's "this run" line counts its own work
(issue #22 item 5: both printed the whole crawl's figures)."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable

from crashsafe.demo.shop import ShopThread
from tests.helpers import get_json, reaped, start_cli, wait_for
from tests.integration.test_cli import crawl_args

PAGES = 4 + 4 * 40


def test_two_commands_on_one_crawl_each_count_their_own_requests_and_records(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=4, per_listing=40, latency_ms=50)
    args = crawl_args(site, any_db_url, "--concurrency", "4")
    figures = []
    with reaped(start_cli(*args)) as one:
        # Both must work, however busy the machine: the first is paused (well within its
        # leases) until the second has made requests of its own, then goes on.
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 10, timeout=60)
        one.send_signal(signal.SIGSTOP)
        paused_at = get_json(f"{site.url}/stats")["requests"]
        with reaped(start_cli(*args)) as two:
            wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= paused_at + 5,
                     timeout=60)  # fmt: skip
            one.send_signal(signal.SIGCONT)
            for proc in (one, two):
                _, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                [line] = re.findall(r"this run: ([\d,]+) requests, ([\d,]+) new records", err)
                figures.append([int(n.replace(",", "")) for n in line])
    server = get_json(f"{site.url}/stats")["requests"]
    (req1, new1), (req2, new2) = figures
    assert req1 > 0 and req2 > 0, figures  # both worked...
    assert req1 + req2 == server == PAGES, figures  # ...and each counted its own pages
    assert new1 + new2 == 160, figures
