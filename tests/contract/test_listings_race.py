"""Pages that share a record, committed at once by two PostgreSQL workers: whichever
commit waits for the other, a record is gone exactly when no page lists it any more.

A lock on one worker's lease grant holds its commit open (after its records are
written, before the commit ends) while the other commits; the test waits on PostgreSQL's
own view of who blocks whom, never on a timer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg import errors as pg_errors

from crashsafe.store import Lease, NewUrl, PageOutcome, Store, open_store
from tests import pg
from tests.clock import ManualClock
from tests.contract.test_passes import HOUR, P, Q, rec, record_x, visit
from tests.helpers import wait_for

C = "c"


@pytest.fixture
def open_pg(pg_url: str, clock: ManualClock) -> Iterator[Callable[[], Store]]:
    """Stores on one PostgreSQL database (one per worker), closed after the test."""
    opened: list[Store] = []

    def make() -> Store:
        opened.append(open_store(pg_url, clock=clock))
        return opened[-1]

    yield make
    for store in opened:
        store.close()


def blocked_by(db: Any, pids: set[int]) -> set[int]:
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE pg_blocking_pids(pid) && %s::int[]", [list(pids)]
    ).fetchall()
    return {pid for (pid,) in rows}


def committing(store: Store, outcome: PageOutcome) -> tuple[threading.Thread, list[Any]]:
    """``outcome`` committed by ``store`` in a thread; its answer lands in the list."""
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(store.commit_pages(C, [outcome])))
    thread.start()
    return thread, answers


def commit_at_once(
    url: str, first: PageOutcome, by: Store, then: PageOutcome, by_too: Store
) -> None:
    """``first`` committed by ``by``, held open by a lock on its lease's grant (its
    records written, its commit not ended), while ``by_too`` commits ``then``; the hold
    ends once the second commit is done or waits on the first. Both commit."""
    lock, watch = pg.connect(url), pg.connect(url)
    lock.autocommit = False
    lock.execute("SELECT 1 FROM lease_grants WHERE id = %s FOR UPDATE", [first.lease.grant_id])
    holder = {int(lock.info.backend_pid)}
    started = []
    try:
        started.append(committing(by, first))
        wait_for(lambda: bool(blocked_by(watch, holder)))
        held = blocked_by(watch, holder)
        started.append(committing(by_too, then))
        second = started[1][0]
        wait_for(lambda: not second.is_alive() or bool(blocked_by(watch, held)))
    finally:
        lock.rollback()
        for thread, _ in started:
            thread.join(60)
        lock.close()
        watch.close()
    assert [answers for _, answers in started] == [[[None]], [[None]]]


def lease_all(store: Store) -> dict[str, Lease]:
    return {x.url: x for x in store.lease(C, store.register_worker(), 100, 60)}


def test_a_page_that_lists_a_record_while_its_old_page_drops_it_at_once(
    pg_url: str, open_pg: Callable[[], Store], clock: ManualClock
) -> None:
    """x on /p. Pass 2: /q lists x (its commit held open) while /p, which dropped x,
    commits. x stays (on /q). Pass 3: /q drops it: gone."""
    one, two = open_pg(), open_pg()
    one.enqueue(C, [NewUrl(P), NewUrl(Q)])
    x = rec("x", "1")
    visit(one, clock, [[(P, [x], {}), (Q, [], {})]], {P: 1, Q: 1})
    clock.advance(HOUR)
    assert one.begin_pass(C).started is not None
    leased = lease_all(one)
    lists = PageOutcome(leased[Q], "done", 200, records=[x], revisit_in=HOUR)
    drops = PageOutcome(leased[P], "done", 200, revisit_in=100 * HOUR)
    commit_at_once(pg_url, lists, one, drops, two)
    one.finish_pass(C)
    assert record_x(one) == (1, None)
    clock.advance(HOUR)
    visit(one, clock, [[(Q, [], {})]], {Q: 100})
    version, gone_at = record_x(one)
    assert version == 2 and gone_at is not None


def test_two_pages_that_drop_a_record_at_once_leave_it_to_a_third_that_lists_it(
    pg_url: str, open_pg: Callable[[], Store], clock: ManualClock
) -> None:
    """x on /a, /d and /b. Pass 2 fetches /a and /b, which both dropped x, committed at
    once (/a held open): /d, not fetched, lists x still: it stays."""
    a, b, d = "http://a/a", "http://a/b", "http://a/d"
    one, two = open_pg(), open_pg()
    one.enqueue(C, [NewUrl(a), NewUrl(d), NewUrl(b)])
    x = rec("x", "1")
    visit(one, clock, [[(a, [x], {}), (d, [x], {}), (b, [x], {})]], {a: 1, b: 1, d: 100})
    clock.advance(HOUR)
    assert one.begin_pass(C).started is not None
    leased = lease_all(one)
    assert sorted(leased) == [a, b]
    drop_a = PageOutcome(leased[a], "done", 200, revisit_in=100 * HOUR)
    drop_b = PageOutcome(leased[b], "done", 200, revisit_in=100 * HOUR)
    commit_at_once(pg_url, drop_a, one, drop_b, two)
    one.finish_pass(C)
    assert record_x(one) == (1, None)


def test_a_deadlock_or_a_serialisation_failure_runs_the_call_again(
    open_pg: Callable[[], Store],
) -> None:
    """PostgreSQL rolls one of two deadlocked transactions back (SQLSTATE 40P01; psycopg's
    DeadlockDetected is no TransactionRollback): the store runs the call again."""
    store = open_pg()
    for error in (pg_errors.DeadlockDetected, pg_errors.SerializationFailure):
        calls: list[type[Exception]] = []

        def call(error: type[Exception] = error, calls: list[type[Exception]] = calls) -> int:
            calls.append(error)
            if len(calls) == 1:
                raise error("rolled back for another transaction's sake")
            return 7

        assert store._run(call) == 7  # type: ignore[attr-defined]
        assert calls == [error, error]


@pytest.mark.parametrize("query", ["take_dropped", "unlist_dropped", "list_records", "mark_gone"])
def test_the_listing_queries_look_up_by_index_whatever_the_statistics_say(
    pg_url: str, query: str
) -> None:
    """20 000 records on 200 pages, written without an ANALYZE (as on a server without
    autovacuum, or before it runs): a commit's listing statements still find their rows
    by index, not by a scan of every record (a hash join over both tables, which such
    statistics chose, took 150 ms a commit at 100 000 records)."""
    from crashsafe.store.postgres import Q

    open_store(pg_url).close()
    with pg.connect(pg_url) as db:
        db.execute(
            "INSERT INTO records (crawl, id, source, key, content_hash, data, first_seen, "
            "last_changed, page) SELECT 'c', 'r' || n, 's', 'r' || n, 'h', '{}', now(), "
            "now(), n / 100 FROM generate_series(0, 19999) AS n"
        )
        db.execute(
            "INSERT INTO record_pages (crawl, record, page) "
            "SELECT 'c', 'r' || n, n / 100 FROM generate_series(0, 19999) AS n"
        )
        pages = list(range(16))
        if query == "mark_gone":
            params: dict[str, Any] = {"crawl": "c", "now": 1.0, "pass": 2}
        elif query == "list_records":
            params = {"crawl": ["c"] * 16, "id": [f"r{p * 100}" for p in pages],
                      "page": pages}  # fmt: skip
        else:
            ids = [json.dumps([f"r{p * 100 + j}" for j in range(1, 100)]) for p in pages]
            params = {"crawl": ["c"] * 16, "page": pages, "ids": ids}
        plan = "\n".join(row[0] for row in db.execute("EXPLAIN " + Q[query], params).fetchall())
    assert "Seq Scan on records" not in plan and "Seq Scan on record_pages" not in plan, plan


@pytest.mark.parametrize("query", ["take_dropped", "unlist_dropped"])
def test_a_pages_dropped_records_are_a_set_difference_not_a_scan_per_row(
    pg_url: str, query: str
) -> None:
    """Which records a page parsed again no longer yields: its listing less the ids it
    yielded, hashed. Tested against the array of ids row by row (``<> ALL``), a page of
    20 000 records took 6 s a commit (the ids scanned once per listed record)."""
    from crashsafe.store.postgres import Q

    open_store(pg_url).close()
    with pg.connect(pg_url) as db:
        ids = json.dumps([f"r{n}" for n in range(100)])
        params = {"crawl": ["c"], "page": [1], "ids": [ids]}
        plan = "\n".join(row[0] for row in db.execute("EXPLAIN " + Q[query], params).fetchall())
    assert "<> ALL" not in plan and "SetOp" in plan, plan
