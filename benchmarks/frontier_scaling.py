"""How the frontier scales with workers: PostgreSQL and SQLite side by side, one run.

    .venv/bin/python benchmarks/frontier_scaling.py [--pg postgresql://postgres@127.0.0.1/test]
        [--workers 1 2 4 8] [--seconds 8] [--batch 16] [--repeat 3]
        [--crawl-pages 5250] [--latency-ms 20] [--skip-crawl] [--backends sqlite postgres]

1. The store alone, no HTTP: N worker processes each claim ``--batch`` URLs and commit
   them done with one record each, refilling in the same transaction
   (``commit_and_lease``, as the crawl engine does), for ``--seconds``. Figures are pages
   claimed and committed per second, counted from the database's rows (done pages over
   the span between the first and the last commit of the run).
2. Crawls: ``crashsafe crawl --workers 1`` and ``--workers 4`` on the demo shop at
   ``--latency-ms``, pages per second from the shop's own count.

``--held-snapshot MINUTES`` measures instead what a long transaction does to PostgreSQL's
claims (it holds back vacuum: a ``SKIP LOCKED`` queue's known failure): the store alone
with 4 workers for MINUTES, without and then with a transaction holding its snapshot the
whole time, pages per second in every 30 s.

Each figure is the median of ``--repeat`` runs; SQLite and PostgreSQL alternate within a
repeat. PostgreSQL runs each measurement in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from crashsafe.store import NewUrl, PageOutcome, RecordRow, open_store  # noqa: E402

CRAWL = "bench"


def record(n: int) -> RecordRow:
    data = {"price": "1.00", "name": "thing"}
    return RecordRow.build(id=f"r{n}", source=CRAWL, key=str(n), url=None, data=data)


def worker(url: str, seconds: float, batch: int, ready: Any, go: Any, out: Any) -> None:
    """One worker process: claim, commit done with a record, refill; until time is up."""
    store = open_store(url, create=False)
    owner = store.register_worker(CRAWL)
    ready.release()
    go.wait()
    deadline = time.monotonic() + seconds
    done = 0
    leases = store.lease(CRAWL, owner, batch, 60)
    while leases and time.monotonic() < deadline:
        pages = [PageOutcome(x, "done", 200, records=[record(x.frontier_id)]) for x in leases]
        _, leases = store.commit_and_lease(
            CRAWL, pages, owner=owner, limit=len(pages), lease_seconds=60
        )
        done += len(pages)
    if leases:
        store.release(CRAWL, [(x, False) for x in leases])
    store.close()
    out.put(done)


def fresh_url(backend: str, pg: str, n: int, folder: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{folder / f'frontier-{n}.db'}"
    from crashsafe.store.postgres_urls import with_schema

    return with_schema(pg, f"bench_frontier_{n}")


def drop(url: str) -> None:
    if url.startswith("postgresql"):
        from crashsafe.store.postgres_urls import drop_schema

        drop_schema(url)


def span_rate(url: str) -> tuple[int, float]:
    """Pages done, and per second between the first and the last commit (from rows)."""
    if url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite:///")) as db:
            n, first, last = db.execute(
                "SELECT count(*), min(done_at), max(done_at) FROM frontier WHERE state = 'done'"
            ).fetchone()
    else:
        import psycopg

        from crashsafe.store.postgres_urls import split_url

        conninfo, schema = split_url(url)
        with psycopg.connect(conninfo, options=f"-c search_path={schema}") as db:
            n, first, last = db.execute(
                "SELECT count(*), extract(epoch FROM min(done_at))::float8, "
                "extract(epoch FROM max(done_at))::float8 FROM frontier WHERE state = 'done'"
            ).fetchone()
    return n, n / max(last - first, 1e-3)


def windows(url: str, width: float) -> list[float]:
    """Pages done a second in each ``width``-second window from the first commit to the
    last, PostgreSQL. The last window is rated over the part of it the run lasted, and
    left out if that is under half a window (a few pages over a moment say nothing)."""
    import psycopg

    from crashsafe.store.postgres_urls import split_url

    conninfo, schema = split_url(url)
    with psycopg.connect(conninfo, options=f"-c search_path={schema}") as db:
        rows = db.execute(
            "WITH d AS (SELECT extract(epoch FROM done_at)::float8 AS t FROM frontier "
            "WHERE state = 'done') SELECT floor((t - (SELECT min(t) FROM d)) / %s)::int AS w, "
            "count(*), max(t) - (SELECT min(t) FROM d) FROM d GROUP BY w ORDER BY w",
            (width,),
        ).fetchall()
    if not rows:
        return []
    found = {w: n for w, n, _ in rows}
    last, span = rows[-1][0], rows[-1][2]
    rates = [found.get(w, 0) / width for w in range(last + 1)]
    lasted = span - last * width
    if last and lasted < width / 2:
        return rates[:-1]
    rates[-1] = found[last] / max(lasted, 1e-3)
    return rates


class HeldSnapshot:
    """A transaction that holds a snapshot open (as a long report or an idle-in-transaction
    session does): PostgreSQL cannot remove any row version that died after it began."""

    def __init__(self, url: str) -> None:
        import psycopg

        from crashsafe.store.postgres_urls import split_url

        conninfo, _ = split_url(url)
        self.db = psycopg.connect(conninfo)
        self.db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        self.db.execute("SELECT txid_current()")  # (an xid too: vacuum's horizon stays)

    def close(self) -> None:
        self.db.rollback()
        self.db.close()


def measure_store(url: str, workers: int, seconds: float, batch: int, urls: int) -> float:
    store = open_store(url)
    for start in range(0, urls, 200_000):  # (in parts: a few million URLs for a long run)
        part = range(start, min(urls, start + 200_000))
        store.enqueue(CRAWL, [NewUrl(f"http://shop.test/p/{i}") for i in part])
    store.close()
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=worker, args=(url, seconds, batch, ready, go, out))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()  # every worker connected and registered: start together
    go.set()
    counted = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join()
    done, rate = span_rate(url)
    assert done == counted, (done, counted)
    if done >= urls:
        print(f"  (every one of the {urls:,} URLs was done before the {seconds:g} s were up: "
              "the run was shorter than asked)", flush=True)  # fmt: skip
    return rate


def measure_crawl(db: str, workers: int, pages: int, latency_ms: float) -> float:
    import subprocess

    from crashsafe.demo.process import ShopProcess
    from crashsafe.demo.shop import ShopOptions

    listings = max(1, pages // 21)
    with ShopProcess(ShopOptions(listings=listings, per_listing=20, latency_ms=latency_ms,
                                 pager=10)) as shop:  # fmt: skip
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-m", "crashsafe", "crawl", "crashsafe.demo.spider:DemoShop",
             "--db", db, "--start-url", f"{shop.url}/list/0", "--no-progress",
             "--workers", str(workers), "--concurrency", "16"],
            check=True, capture_output=True,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        return int(shop.stats()["requests"]) / elapsed


def held_snapshot(pg: str, seconds: float, batch: int, workers: int = 4) -> None:
    """A ``SKIP LOCKED`` queue's known failure, measured: while one transaction holds an
    old snapshot, no row version that died since can be removed, and every claim walks
    past the index entries of all the pages claimed since. Same run, without then with."""
    width = 30.0
    rows = {}
    for hold in (False, True):
        url = fresh_url("postgres", pg, time.time_ns() % 10**12, Path("."))
        held = None
        try:
            # more than 4 workers claim here (a run that ran dry says so)
            urls = int(12_000 * seconds * workers / 4)
            store = open_store(url)
            store.close()
            held = HeldSnapshot(url) if hold else None
            rate = measure_store(url, workers, seconds, batch, urls)
            rows[hold] = (rate, windows(url, width))
        finally:
            if held is not None:
                held.close()
            drop(url)
        print(f"  {'with' if hold else 'without'} a held snapshot: {rate:,.0f} pages/s", flush=True)
    print(f"\nPostgreSQL, store alone, {workers} workers, batches of {batch}, "
          f"{seconds / 60:g} minutes: pages/s in each {width:g} s")  # fmt: skip
    for hold, (rate, per) in rows.items():
        name = "held snapshot" if hold else "no snapshot held"
        print(f"{name:>17}  overall {rate:>7,.0f}  " + " ".join(f"{x:,.0f}" for x in per))
    if len(rows) == 2 and rows[False][0]:
        per = rows[True][1]
        print(f"held / not held, overall: {rows[True][0] / rows[False][0]:.0%}" + (
            f"; held, last window / first: {per[-1] / per[0]:.0%}"
            if len(per) >= 2 and per[0] else ""))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--crawl-pages", type=int, default=5250)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--skip-crawl", action="store_true")
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument(
        "--held-snapshot", type=float, default=0.0, metavar="MINUTES",
        help="instead: PostgreSQL's store alone with 4 workers for MINUTES, without and "
        "then with a transaction that holds back vacuum all along; pages/s per 30 s",
    )  # fmt: skip
    args = parser.parse_args()
    if args.held_snapshot:
        held_snapshot(args.pg, args.held_snapshot * 60, args.batch)
        return
    backends = args.backends
    store_rates: dict[tuple[str, int], list[float]] = {}
    crawl_rates: dict[tuple[str, int], list[float]] = {}
    n = 0
    with tempfile.TemporaryDirectory(prefix="crashsafe-frontier-") as tmp:
        folder = Path(tmp)
        for rep in range(args.repeat):
            for workers in args.workers:
                for backend in backends:
                    n += 1
                    url = fresh_url(backend, args.pg, n, folder)
                    try:
                        # enough URLs that nobody runs dry: the fastest seen here, with room
                        urls = int(60_000 * args.seconds / 8 * max(1, workers / 2))
                        rate = measure_store(url, workers, args.seconds, args.batch, urls)
                    finally:
                        drop(url)
                    store_rates.setdefault((backend, workers), []).append(rate)
                    print(f"  repeat {rep + 1}, {backend}, {workers} workers: "
                          f"{rate:,.0f} pages/s", flush=True)  # fmt: skip
            if args.skip_crawl:
                continue
            for workers in (1, 4):
                for backend in backends:
                    n += 1
                    url = fresh_url(backend, args.pg, n, folder)
                    try:
                        rate = measure_crawl(url, workers, args.crawl_pages, args.latency_ms)
                    finally:
                        drop(url)
                    crawl_rates.setdefault((backend, workers), []).append(rate)
                    print(f"  repeat {rep + 1}, crawl, {backend}, {workers} workers: "
                          f"{rate:,.0f} pages/s", flush=True)  # fmt: skip

    med = statistics.median
    print(f"\nStore alone: claims + commits per second (batches of {args.batch}, one record "
          f"per page), medians of {args.repeat}")  # fmt: skip
    print(f"{'workers':>8}  {'SQLite':>10}  {'PostgreSQL':>11}  {'PG / SQLite':>11}")
    nan = [float("nan")]
    for workers in args.workers:
        lite = med(store_rates.get(("sqlite", workers), nan))
        pg = med(store_rates.get(("postgres", workers), nan))
        print(f"{workers:>8}  {lite:>10,.0f}  {pg:>11,.0f}  {pg / lite:>10.2f}x")
    if crawl_rates:
        print(f"\nCrawl of the demo shop ({args.crawl_pages:,} pages, {args.latency_ms:g} ms "
              f"per page, concurrency 16 per worker): pages per second, medians")  # fmt: skip
        print(f"{'workers':>8}  {'SQLite':>10}  {'PostgreSQL':>11}")
        for workers in (1, 4):
            lite = med(crawl_rates.get(("sqlite", workers), nan))
            pg = med(crawl_rates.get(("postgres", workers), nan))
            print(f"{workers:>8}  {lite:>10,.0f}  {pg:>11,.0f}")


if __name__ == "__main__":
    main()
