"""Where a crawl's time goes: slot states, commit waits and the loop's CPU, measured.

    .venv/bin/python benchmarks/where_time_goes.py [--products 10000] [--latency-ms 0]
                                                   [--concurrency 16] [--pager 10]
                                                   [--lease-ahead 0]

Starts the demo shop in its own process and crawls it in this process with a Crawler
whose hooks only take times: every millisecond it samples what the ``concurrency`` slots
hold (a page being fetched or parsed, a page queued for the next commit, a page in the
commit under way), and per page it times fetch + parse and the wait for the commit.
Prints the averages, the store round trips (request to answer) and the event loop's CPU
time against the wall time. For a profile of the functions, run the crawl under py-spy:

    py-spy record -o crawl.svg -- .venv/bin/python -m crashsafe crawl \\
        crashsafe.demo.spider:DemoShop --db sqlite:///x.db --start-url URL --no-progress
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from crashsafe import aio
from crashsafe.crawl.engine import Crawler
from crashsafe.demo.process import ShopProcess
from crashsafe.demo.shop import ShopOptions
from crashsafe.demo.spider import DemoShop
from crashsafe.store import PageOutcome, open_store

T = TypeVar("T")


class TimedCrawler(Crawler):
    """A Crawler that records where its pages are; the crawl itself is unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.working = 0  # pages being fetched or parsed
        self.in_commit = 0  # pages in the commit under way
        self.samples: list[tuple[int, int, int]] = []  # (working, queued, in commit)
        self.page_work: list[float] = []  # fetch + parse, per page
        self.commit_waits: list[float] = []  # outcome ready -> committed, per page
        self.round_trips: list[tuple[float, int]] = []  # (seconds, pages) per commit

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if getattr(fn, "__name__", "") != "commit_and_lease":
            return await super()._call(fn, *args, **kwargs)
        pages = len(args[1])
        self.in_commit = pages
        started = time.perf_counter()
        try:
            return await super()._call(fn, *args, **kwargs)
        finally:
            self.round_trips.append((time.perf_counter() - started, pages))
            self.in_commit = 0

    async def _commit(self, outcome: PageOutcome) -> str | None:
        started = time.perf_counter()
        try:
            return await super()._commit(outcome)
        finally:
            self.commit_waits.append(time.perf_counter() - started)

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(0.001)
            self.samples.append((self.working, len(self._commit_queue), self.in_commit))

    async def _loop(self) -> bool:
        assert self._processor is not None
        processor = self._processor
        process = processor.process

        async def timed(*args: Any) -> PageOutcome:
            started = time.perf_counter()
            self.working += 1
            try:
                return await process(*args)
            finally:
                self.working -= 1
                self.page_work.append(time.perf_counter() - started)

        processor.process = timed  # type: ignore[method-assign]
        sampler = asyncio.create_task(self._sample())
        try:
            return await super()._loop()
        finally:
            sampler.cancel()


def ms(values: list[float]) -> str:
    if not values:
        return "-"
    q = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    mean = statistics.fmean(values)
    return f"mean {mean * 1000:.2f} ms, p50 {q[4] * 1000:.2f}, p90 {q[8] * 1000:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--products", type=int, default=10_000)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--pager", type=int, default=10)
    parser.add_argument("--lease-ahead", type=int, default=0)
    args = parser.parse_args()
    listings = max(1, args.products // 20)
    options = ShopOptions(
        listings=listings, per_listing=20, latency_ms=args.latency_ms, pager=args.pager
    )
    with ShopProcess(options) as shop, tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'crawl.db'}")
        settings = DemoShop.crawl_settings(
            concurrency=args.concurrency, lease_ahead=args.lease_ahead
        )
        crawler = TimedCrawler(
            DemoShop(), store, settings=settings, start_urls=[f"{shop.url}/list/0"]
        )
        wall, cpu = time.perf_counter(), time.thread_time()
        result = aio.run(crawler.run())
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        store.close()
    pages = result.stats.done
    working, queued, committing = (statistics.fmean(s) for s in zip(*crawler.samples, strict=True))
    trips = [t for t, _ in crawler.round_trips]
    per_commit = sum(n for _, n in crawler.round_trips) / max(1, len(trips))
    print(
        f"{pages:,} pages in {wall:.2f} s ({pages / wall:,.0f} pages/s), latency "
        f"{args.latency_ms:g} ms, concurrency {args.concurrency}, lease ahead "
        f"{args.lease_ahead}, pager {args.pager}"
    )
    print(
        f"pages, sampled every ms: {working:.1f} fetching or parsing, {queued:.1f} queued "
        f"for a commit, {committing:.1f} in the commit under way"
    )
    print(f"per page, fetch + parse: {ms(crawler.page_work)}")
    print(f"per page, wait for its commit: {ms(crawler.commit_waits)}")
    print(f"store round trips: {len(trips):,}, {per_commit:.1f} pages each, {ms(trips)}")
    print(f"event loop thread CPU: {cpu:.2f} s of {wall:.2f} s wall ({cpu / wall:.0%} busy)")


if __name__ == "__main__":
    sys.exit(main())
