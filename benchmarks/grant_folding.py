"""Lease grants that fold into counts (#29 item 4): a crawl that runs pass after pass keeps
about two grant rows a page instead of one a page per pass, and the figures made of them
(``stats``: status, the live line every second) stay as cheap as the crawl is large.

    .venv/bin/python benchmarks/grant_folding.py [--pages 10000] [--passes 15]
        [--backends sqlite postgres] [--pg postgresql://...]

For each backend, in one run, the same work twice (one running worker, every page leased
and committed done in each pass, an hour between passes): once folding as each pass
begins (what ``crawl --every``/``--continuous`` does), once never folding (the store before
this change kept every grant). At the end: the rows of lease_grants, the database's size
after ``compact`` (VACUUM), the time of one ``stats`` call (median of 5) and the time the
folds took in all.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import ManualClock  # noqa: E402
from store_size import scratch_url, size_of  # noqa: E402

from crashsafe.store import NewUrl, PageOutcome, open_store  # noqa: E402

CRAWL = "bench"


def grant_rows(url: str) -> int:
    """The rows of lease_grants (plain SQL: no store call counts them)."""
    sql = "SELECT count(*) FROM lease_grants"
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            return int(db.execute(sql).fetchone()[0])
    import psycopg

    from crashsafe.store.postgres_urls import options_of

    conninfo, schema, _ = options_of(url)
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(f'SET search_path TO "{schema}"')
        row = db.execute(sql).fetchone()
        return int(row[0]) if row else 0


def one(url: str, pages: int, passes: int, fold: bool) -> dict[str, float]:
    clock = ManualClock()
    store = open_store(url, clock=clock)
    try:
        store.enqueue(CRAWL, [NewUrl(f"http://127.0.0.1:9/p/{n}") for n in range(pages)])
        owner = store.register_worker(CRAWL, run="benchrun")
        folding = 0.0
        for number in range(passes):
            if number:
                clock.now += 3600
                store.recrawl(CRAWL)
                if fold:
                    started = time.perf_counter()
                    store.fold_grants(CRAWL)
                    folding += time.perf_counter() - started
            while leased := store.lease(CRAWL, owner, 500, 600):
                outs = [PageOutcome(x, "done", 200) for x in leased]
                assert store.commit_pages(CRAWL, outs) == [None] * len(outs)
        store.compact()  # (autovacuum's work, done now: the sizes are of live rows)
        stats = []
        for _ in range(5):
            started = time.perf_counter()
            figures = store.stats(CRAWL)
            stats.append(time.perf_counter() - started)
        assert figures.requests == pages * passes, figures
        return {
            "rows": grant_rows(url),
            "mb": size_of(store, url) / 1e6,
            "stats": statistics.median(stats),
            "folding": folding,
        }
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--passes", type=int, default=15)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    args = ap.parse_args()
    results = []
    for backend in args.backends:
        for fold in (True, False):
            with scratch_url(backend, args.pg, f"grants_{int(fold)}") as url:
                r = one(url, args.pages, args.passes, fold)
            results.append((backend, fold, r))
            print(f"{backend} fold={fold}: {r}", file=sys.stderr, flush=True)
    print(f"\n{args.pages:,} pages, {args.passes} passes ({args.pages * args.passes:,} grants)")
    head = ["backend", "grants", "rows kept", "MB", "stats()", "folds in all"]
    widths = [10, 12, 10, 8, 10, 13]
    print(" ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for backend, fold, r in results:
        how = "folded" if fold else "kept"
        print(f"{backend:<10} {how:>12} {r['rows']:>10,} {r['mb']:>8.1f} "
              f"{r['stats'] * 1000:>8.1f}ms {r['folding']:>12.2f}s")  # fmt: skip
    if "postgres" in args.backends:
        print("(PostgreSQL's MB: its files after VACUUM, which do not shrink: the space of "
              "deleted rows is reused)")  # fmt: skip


if __name__ == "__main__":
    main()
