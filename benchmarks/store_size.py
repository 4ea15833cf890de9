"""A store that stays small (#29 item 4): what ending a pass costs as records grow, and
what pruning a million delivered outbox events gives back.

    .venv/bin/python benchmarks/store_size.py [--records 100000 1000000] [--per-page 100]
        [--pass-pages 100] [--backends sqlite postgres] [--pg postgresql://...]

For each size and backend, in one run:

1. A crawl of ``--records`` records, ``--per-page`` to a page, with a webhook endpoint (so
   every record's event is written, fanned out to a delivery), every delivery marked
   delivered (in SQL: setup, not measured).
2. A pass of ``--pass-pages`` pages (a continuous crawl's pass of the pages due), each
   yielding one record fewer; ``finish_pass`` timed: it marks those records gone and
   notes the pass's figures. It should cost what the pass holds, not what the crawl does.
3. 31 days on, ``prune_outbox(30 days)`` timed, and ``compact`` (SQLite: VACUUM;
   PostgreSQL: VACUUM (ANALYZE)); the database's size before pruning, after it and after
   compacting.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import ManualClock  # noqa: E402

from crashsafe.store import NewUrl, PageOutcome, RecordRow, Store, open_store  # noqa: E402

CRAWL = "bench"
HOOK = "http://127.0.0.1:9/hook"
DAY = 86400.0


def page_records(page: int, per_page: int, drop: int = 0) -> list[RecordRow]:
    return [
        RecordRow.build(id=f"r{page}-{n}", source="bench", key=f"{page}-{n}", url=None,
                        data={"page": page, "n": n, "price": f"{n}.99", "pad": "x" * 80})
        for n in range(per_page - drop)
    ]  # fmt: skip


def commit(store: Store, pages: dict[str, list[RecordRow]]) -> None:
    owner = store.register_worker(CRAWL)
    leased = store.lease(CRAWL, owner, len(pages), 600)
    outs = [PageOutcome(x, "done", 200, records=pages[x.url], revisit_in=DAY) for x in leased]
    assert store.commit_pages(CRAWL, outs) == [None] * len(outs)


def size_of(store: Store, url: str) -> int:
    if url.startswith("sqlite:"):
        path = Path(url.removeprefix("sqlite:///"))
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    with store._read() as tx:  # type: ignore[attr-defined]
        return int(tx.rows("store_bytes", {})[0][0])


def deliver_all(url: str) -> None:
    """Setup: every delivery delivered, as a dispatcher would leave them."""
    sql = "UPDATE deliveries SET state = 'delivered', attempts = 1, done_at = {now}"
    if url.startswith("sqlite:"):
        db = sqlite3.connect(url.removeprefix("sqlite:///"))
        with db:
            db.execute(sql.format(now=time.time()))
        db.close()
        return
    import psycopg

    from crashsafe.store.postgres_urls import options_of

    conninfo, schema, _ = options_of(url)
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(f'SET search_path TO "{schema}"')
        db.execute(sql.format(now="now()"))


def one(url: str, records: int, per_page: int, pass_pages: int) -> dict[str, float]:
    clock = ManualClock()
    store = open_store(url, clock=clock, create=True)
    try:
        pages = records // per_page
        store.enqueue(CRAWL, [NewUrl(f"http://shop.test/p/{n}") for n in range(pages)])
        store.endpoint(CRAWL, HOOK)
        started = time.perf_counter()
        batch = 20
        for first, last in ((0, pass_pages), (pass_pages, pages)):
            for low in range(first, last, batch):
                commit(store, {f"http://shop.test/p/{n}": page_records(n, per_page)
                               for n in range(low, min(low + batch, last))})  # fmt: skip
            if first == 0:
                clock.now += 1000  # the pass's pages were done earlier than the rest
        built = time.perf_counter() - started
        deliver_all(url)
        clock.now += 600
        begun = store.recrawl(CRAWL, older_than=900)
        assert begun.requeued == pass_pages, begun
        commit(store, {f"http://shop.test/p/{n}": page_records(n, per_page, drop=1)
                       for n in range(pass_pages)})  # fmt: skip
        t = time.perf_counter()
        gone = store.finish_pass(CRAWL)
        finish = time.perf_counter() - t
        assert gone == pass_pages, gone
        deliver_all(url)
        before = size_of(store, url)
        clock.now += 31 * DAY
        t = time.perf_counter()
        pruned = store.prune_outbox(CRAWL, 30 * DAY)
        prune = time.perf_counter() - t
        pruned_size = size_of(store, url)
        t = time.perf_counter()
        store.compact()
        compact = time.perf_counter() - t
        return {"records": records, "built": built, "finish_pass": finish,
                "events_pruned": pruned.events, "prune": prune, "compact": compact,
                "mb_before": before / 1e6, "mb_pruned": pruned_size / 1e6,
                "mb_after": size_of(store, url) / 1e6}  # fmt: skip
    finally:
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--per-page", type=int, default=100)
    ap.add_argument("--pass-pages", type=int, default=100)
    ap.add_argument("--backends", nargs="+", default=["sqlite", "postgres"])
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    args = ap.parse_args()
    rows = []
    for records in args.records:
        for backend in args.backends:
            with scratch_url(backend, args.pg, f"size_{records}") as url:
                row = one(url, records, args.per_page, args.pass_pages)
            rows.append((backend, row))
            print(f"{backend} {records:,}: {row}", file=sys.stderr, flush=True)
    head = ["backend", "records", "finish_pass", "events pruned", "prune", "compact",
            "MB before", "pruned", "compacted"]  # fmt: skip
    widths = [10, 10, 12, 14, 8, 8, 10, 8, 10]
    print("\n" + " ".join(h.rjust(w) for h, w in zip(head, widths, strict=True)))
    for backend, r in rows:
        print(f"{backend:<10} {r['records']:>10,} {r['finish_pass']:>11.3f}s "
              f"{r['events_pruned']:>14,} {r['prune']:>7.1f}s {r['compact']:>7.1f}s "
              f"{r['mb_before']:>10.1f} {r['mb_pruned']:>8.1f} {r['mb_after']:>10.1f}")  # fmt: skip


@contextlib.contextmanager
def scratch_url(backend: str, pg: str, name: str) -> Iterator[str]:
    """A fresh database of ``backend`` (a temporary SQLite file, or a schema in ``pg``)
    for one measurement, gone afterwards."""
    if backend == "sqlite":
        folder = tempfile.mkdtemp(prefix=f"crashsafe-{name}-")
        try:
            yield f"sqlite:///{folder}/{name}.db"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    url = f"{pg}?schema=bench_{name}_{int(time.time())}"
    try:
        yield url
    finally:
        drop_schema(url)


def drop_schema(url: str) -> None:
    import psycopg

    from crashsafe.store.postgres_urls import options_of

    conninfo, schema, _ = options_of(url)
    with psycopg.connect(conninfo, autocommit=True) as db:
        db.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
