"""Adaptive revisits over simulated days (#29 item 2): what a continuous crawl fetches each
day, what it costs against the first crawl, and how fresh its records stay, beside a full
recrawl every day.

    .venv/bin/python benchmarks/revisits.py [--products 4000] [--days 14]
        [--revisit-min 1d] [--revisit-max 30d] [--unchanged]

The demo shop reprices about 10 % of its products a day and discontinues 2 % (a round a
day; its listings shift when products go), or with ``--unchanged`` never changes. A
crawl runs in this process on SQLite, its store on a clock the script moves a day at a
time (time is simulated; the crawls are real, on 127.0.0.1). Each day, two databases
crawled the same way the first day:

- **due**: `recrawl --due` (the pages due by their own change history), then the crawl;
- **full**: `recrawl` (every page, with validators: 304 for what did not change).

For each: pages fetched, body bytes, wall time against the first crawl's, and the
records out of date after the day's crawl (price or presence differs from the shop's
ground truth, ``/catalogue``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import ManualClock  # noqa: E402

from crashsafe import aio, open_store  # noqa: E402
from crashsafe.crawl.engine import Crawler  # noqa: E402
from crashsafe.demo.process import ShopProcess, free_port  # noqa: E402
from crashsafe.demo.shop import ShopOptions  # noqa: E402
from crashsafe.demo.spider import DemoShop  # noqa: E402
from crashsafe.durations import seconds  # noqa: E402
from crashsafe.store import Store  # noqa: E402

DAY = 86400.0


def get(url: str) -> Any:
    with urllib.request.urlopen(url) as resp:
        return json.load(resp)


def reset(shop: ShopProcess) -> None:
    urllib.request.urlopen(urllib.request.Request(f"{shop.url}/reset", method="POST")).read()


def crawl(store: Store, shop: ShopProcess, settings: dict[str, float]) -> float:
    spider = DemoShop()
    crawler = Crawler(
        spider, store, start_urls=[f"{shop.url}/list/0"], store_process=False,
        handle_signals=False, settings=DemoShop.crawl_settings(**settings),
    )  # fmt: skip
    started = time.perf_counter()
    result = aio.run(crawler.run())
    assert not result.interrupted and result.stats.failed == 0, result
    return time.perf_counter() - started


def stale(store: Store, truth: dict[str, dict[str, str]]) -> int:
    """Records whose price or presence differs from the shop's."""
    mine = {r.key: r for r in store.iter_records("demo-shop")}
    wrong = 0
    for key in truth.keys() | mine.keys():
        r, t = mine.get(key), truth.get(key)
        if t is None:
            wrong += r is not None and r.gone_at is None
        elif r is None or r.gone_at is not None or r.data.get("price") != t["price"]:
            wrong += 1
    return wrong


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--products", type=int, default=4000)
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--revisit-min", default="1d")
    ap.add_argument("--revisit-max", default="30d")
    ap.add_argument("--unchanged", action="store_true", help="The shop never changes.")
    args = ap.parse_args()
    settings = {"revisit_min": seconds(args.revisit_min) or DAY,
                "revisit_max": seconds(args.revisit_max) or 30 * DAY}  # fmt: skip
    options = ShopOptions(listings=max(1, args.products // 20), per_listing=20, pager=10)
    port = free_port()
    clock = ManualClock()
    folder = Path(tempfile.mkdtemp(prefix="crashsafe-revisits-"))
    stores = {name: open_store(f"sqlite:///{folder / name}.db", clock=clock, create=True)
              for name in ("due", "full")}  # fmt: skip
    rows = []
    try:
        first = {}
        with ShopProcess(options, port=port) as shop:
            for name, store in stores.items():
                get(f"{shop.url}/stats")
                reset(shop)
                wall = crawl(store, shop, settings)
                first[name] = (wall, get(f"{shop.url}/stats"))
        base_wall = sum(w for w, _ in first.values()) / 2
        base_bytes = first["due"][1]["bytes"]
        base_pages = first["due"][1]["requests"]
        print(f"first crawl: {base_pages:,} requests, {base_bytes:,} body bytes, "
              f"{base_wall:.2f} s", file=sys.stderr)  # fmt: skip
        for day in range(1, args.days + 1):
            clock.now += DAY
            today = dataclasses.replace(options, round=0 if args.unchanged else day)
            with ShopProcess(today, port=port) as shop:
                truth = shop.catalogue()
                for name, store in stores.items():
                    reset(shop)
                    store.recrawl("demo-shop", due=(name == "due"))
                    wall = crawl(store, shop, settings)
                    served = get(f"{shop.url}/stats")
                    rows.append((day, name, served["requests"], served["not_modified"],
                                 served["bytes"], wall, stale(store, truth)))  # fmt: skip
                    print(f"day {day} {name}: {rows[-1]}", file=sys.stderr, flush=True)
    finally:
        for store in stores.values():
            store.close()
    print(f"\n{options.pages:,} pages; first crawl {base_pages:,} requests, "
          f"{base_bytes:,} body bytes, {base_wall:.2f} s; revisit {args.revisit_min}.."
          f"{args.revisit_max}")  # fmt: skip
    print(f"{'day':>3} {'mode':<5} {'requests':>9} {'304s':>7} {'body bytes':>11} "
          f"{'bytes':>6} {'seconds':>8} {'time':>6} {'stale records':>14}")  # fmt: skip
    for day, name, requests, n304, size, wall, wrong in rows:
        share, took = size / base_bytes, wall / base_wall
        print(f"{day:>3} {name:<5} {requests:>9,} {n304:>7,} {size:>11,} "
              f"{share:>6.1%} {wall:>8.2f} {took:>6.0%} {wrong:>14,}")  # fmt: skip
    for name in ("due", "full"):
        mine = [r for r in rows if r[1] == name]
        n = len(mine)
        requests, took = sum(r[2] for r in mine) / n, sum(r[5] for r in mine) / n / base_wall
        print(f"{name}: {requests:,.0f} requests a day, {took:.0%} of the first crawl's time, "
              f"{sum(r[6] for r in mine) / n:,.0f} stale records on average")  # fmt: skip


if __name__ == "__main__":
    main()
