"""The Store contract for a store that stays small: old outbox events pruned once no
endpoint still has them to deliver, and the database compacted."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from crashsafe.store import (
    STALE,
    DeliveryResult,
    NewUrl,
    PageOutcome,
    Pruned,
    RecordRow,
    RunFigures,
    Store,
    sql_retention,
)
from crashsafe.store.sql_retention import FOLD_GRACE, FOLD_WALK
from tests.clock import ManualClock
from tests.contract.conftest import Backend
from tests.contract.test_effects import HOOK, C, crawl_page, rec

DAY = 86400.0


def test_old_delivered_events_are_pruned_and_what_is_still_owed_stays(
    store: Store, backend: Backend, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    endpoint = store.endpoint(C, HOOK)
    crawl_page(store, "http://a/1", [rec("a", "1"), rec("b", "1"), rec("c", "1")])
    for price in ("2", "3"):  # a and b change twice; c never
        clock.advance(DAY)
        store.recrawl(C)
        crawl_page(store, "http://a/1", [rec("a", price), rec("b", price), rec("c", "1")])
    owner = store.register_worker()
    leased = store.lease_deliveries(endpoint.id, owner, 100, 60)
    assert len(leased) == 7
    owed = [d for d in leased if (d.record_id, d.version) == ("id-b", 3)]
    store.finish_deliveries(
        owner,
        [DeliveryResult(d, "retry", 503, "HTTP 503", 5.0) if d in owed
         else DeliveryResult(d, "delivered", 200) for d in leased],
    )  # fmt: skip
    young = store.prune_outbox(C, 30 * DAY)  # nothing is old enough yet
    assert (young.events, young.deliveries) == (0, 0)
    clock.advance(40 * DAY)
    pruned = store.prune_outbox(C, 30 * DAY)
    # a's three, b's first two and c's one go; b's third is still owed
    assert (pruned.events, pruned.deliveries) == (6, 6)
    assert backend.count("outbox") == 1 and backend.count("deliveries") == 1
    assert store.record_versions(C, "id-a") == []
    assert {r.key: r.version for r in store.iter_records(C)} == {"a": 3, "b": 3, "c": 1}
    # c changes: only its new version is sent, not its first again (pruned: delivered)
    store.recrawl(C)
    crawl_page(store, "http://a/1", [rec("a", "3"), rec("b", "3"), rec("c", "2")])
    clock.advance(10)
    due = store.lease_deliveries(endpoint.id, owner, 100, 60)
    assert sorted((d.record_id, d.version, d.type) for d in due) == [
        ("id-b", 3, "record.updated"),
        ("id-c", 2, "record.updated"),
    ]
    assert store.prune_outbox(C, 30 * DAY) == Pruned(0, 0)  # nothing new is old


def test_compact_gives_back_the_space_of_deleted_rows(
    store: Store, backend: Backend, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    endpoint = store.endpoint(C, HOOK)
    big = [rec(f"k{n}", "x" * 2000) for n in range(300)]
    crawl_page(store, "http://a/1", big)
    owner = store.register_worker()
    leased = store.lease_deliveries(endpoint.id, owner, 1000, 60)
    store.finish_deliveries(owner, [DeliveryResult(d, "delivered", 200) for d in leased])
    store.recrawl(C)
    crawl_page(store, "http://a/1", [])  # every record gone: 300 more events
    store.finish_pass(C)
    leased = store.lease_deliveries(endpoint.id, owner, 1000, 60)
    store.finish_deliveries(owner, [DeliveryResult(d, "delivered", 200) for d in leased])
    clock.advance(2 * DAY)
    assert store.prune_outbox(C, DAY).events == 600
    before, after = store.compact()
    assert before > 0 and after > 0
    if backend.name == "sqlite":  # (PostgreSQL's VACUUM makes the space reusable only)
        assert after < before - 600_000


def test_a_records_versions_read_back_oldest_first_as_far_back_as_the_retention(
    store: Store, clock: ManualClock
) -> None:
    """a changes twice, then leaves the page; b never changes (no webhook endpoint: its
    only version is the record itself). Pruning takes the old versions; the current one
    of each record stays."""

    def a(price: str, url: str) -> RecordRow:
        return RecordRow.build(id="id-a", source="s", key="a", url=url, data={"price": price})

    store.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(store, "http://a/1", [a("1", "http://a/one"), rec("b", "1")])
    for records in ([a("2", "http://a/two"), rec("b", "1")], [rec("b", "1")]):
        clock.advance(DAY)
        store.recrawl(C)
        crawl_page(store, "http://a/1", records)
        store.finish_pass(C)
    start = clock.now - 2 * DAY
    history = [(r.key, r.version, r.data, r.url, round(r.last_changed - start, 3), event)
               for r, event in store.iter_versions(C)]  # fmt: skip
    assert history == [
        ("a", 1, {"price": "1"}, "http://a/one", 0.0, "created"),
        ("a", 2, {"price": "2"}, "http://a/two", DAY, "updated"),
        ("a", 3, {"price": "2"}, "http://a/two", 2 * DAY, "gone"),
        ("b", 1, {"price": "1"}, None, 0.0, "created"),
    ]
    clock.advance(30 * DAY)
    store.prune_outbox(C, 31.5 * DAY)  # versions made more than 31.5 days ago go: v1 of a
    history = [(r.key, r.version, event) for r, event in store.iter_versions(C)]
    assert history == [("a", 2, "updated"), ("a", 3, "gone"), ("b", 1, "created")]
    only_b = [(r.key, r.version) for r, _ in store.iter_versions(C, keys={"b", "zz"})]
    assert only_b == [("b", 1)]


# -- lease grants fold into counts ---------------------------------------------------------


def figures(store: Store) -> tuple[object, ...]:
    """Every figure lease grants make: the crawl's, and each worker's pages."""
    return store.stats(C), {w.owner: w.pages for w in store.workers(C)}


@pytest.mark.parametrize("walk", [FOLD_WALK, 3])
def test_folded_grants_keep_every_figure_while_the_table_stays_the_crawls_size(
    open_stores: Callable[[], Store],
    backend: Backend,
    clock: ManualClock,
    walk: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sql_retention, "FOLD_WALK", walk)  # (3: many walks, as on a big one)
    urls = [f"http://a/{i}" for i in range(4)]
    # run a: three pages done, one retried, then that one's lease is lost (its worker
    # killed: another takes the URL over once the lease lapses); then run a is over
    a = open_stores()
    a.enqueue(C, [NewUrl(u) for u in urls])
    leases = {x.url: x for x in a.lease(C, a.register_worker(C, run="run0000a"), 10, 60)}
    done = [PageOutcome(leases[u], "done", 200, records=[rec(u[-1], "1")]) for u in urls[:3]]
    assert a.commit_pages(C, done) == [None] * 3
    assert a.commit_pages(C, [PageOutcome(leases[urls[3]], "retry", 503, "HTTP 503")]) == [None]
    clock.advance(3600)
    [lost] = a.lease(C, a.register_worker(C), 10, 60)
    a.close()
    # run b, still running: passes 2 and 3 fetch every page again, one changes each time
    b = open_stores()
    mark = b.high_water("run0000b")
    clock.advance(120)  # (run a's lost lease has lapsed)
    owner = b.register_worker(C, run="run0000b")
    for price in ("2", "3"):
        b.recrawl(C)
        mine = b.lease(C, owner, 10, 60)
        outs = [PageOutcome(x, "done", 200, records=[rec(x.url[-1], price if x.url == urls[0]
                else "1")]) for x in mine]  # fmt: skip
        assert b.commit_pages(C, outs) == [None] * 4
    b.recrawl(C)
    in_flight = b.lease(C, owner, 10, 60)  # pass 4 under way
    before, run_before = figures(b), b.since(C, mark)
    assert run_before == RunFigures(8, {"record.created": 1, "record.updated": 1})
    assert before[0].repeated == 1  # the lost lease
    assert backend.count("lease_grants") == 5 + 3 * 4

    # run b's pass 2, which pass 3 stands for (pass 3's grants stay: each page's newest
    # done, and pass 4's: current leases), and run a's retried grant, which its lost
    # one stands for. Run a is over, but only just (FOLD_GRACE: a run's figures are
    # read as it ends, when no worker of it is alive) ...
    assert b.fold_grants(C) == 4 + 1
    assert (figures(b), b.since(C, mark)) == (before, run_before)
    clock.advance(FOLD_GRACE + 1)
    assert b.fold_grants(C) == 4  # ... and then its other grants go
    assert backend.count("lease_grants") == 8
    assert (figures(b), b.since(C, mark)) == (before, run_before)
    assert b.fold_grants(C) == 0  # nothing more until pages are leased again

    # the leases in flight commit as ever; a pass 5, and run b is over: its grants stay
    # rows a while, but for those a newer one stands for (pass 4's) ...
    outs = [PageOutcome(x, "done", 200, records=[rec(x.url[-1], "1")]) for x in in_flight]
    assert b.commit_pages(C, outs) == [None] * 4
    b.recrawl(C)
    last = b.lease(C, owner, 10, 60)
    assert b.commit_pages(C, [PageOutcome(x, "done", 200, records=[rec(x.url[-1], "1")])
                              for x in last]) == [None] * 4  # fmt: skip
    before, run_before = figures(b), b.since(C, mark)
    clock.advance(2 * FOLD_GRACE)  # run b waits for its next pass, its worker at work
    b.touch_worker(owner)
    b.close()
    c = open_stores()
    assert c.fold_grants(C) == 4 + 4  # (pass 3's too: newer done grants stand for them)
    assert c.since(C, mark) == run_before  # (it ended now, not with its last grant)
    # ... then all go (SQLite keeps the table's last row: it would give the next grant
    # that row's id again)
    clock.advance(FOLD_GRACE + 1)
    assert c.fold_grants(C) == 4 - (backend.name == "sqlite")
    # the crawl's figures stay, and the run's requests (its records' figures, read as
    # the run ended, are no more: which pages its grants committed has gone)
    assert figures(c)[0] == before[0] and c.since(C, mark).requests == run_before.requests
    c.recrawl(C)
    assert min(x.grant_id for x in c.lease(C, c.register_worker(C), 10, 60)) > max(
        x.grant_id for x in last
    )
    # the lost lease's worker comes back: its commit is refused, folded or not
    assert c.commit_pages(C, [PageOutcome(lost, "done", 200)]) == [STALE]
    # a run that died holding leases: they stay rows while they are current (SQLite's
    # row kept last time goes now: it is no longer the last)
    c.close()
    clock.advance(FOLD_GRACE + 1)
    d = open_stores()
    assert d.fold_grants(C) == (backend.name == "sqlite")
    assert backend.count("lease_grants") == 4 and d.stats(C).leased == 4


def test_a_runs_workers_fold_as_one_whichever_leased_a_page(
    open_stores: Callable[[], Store], backend: Backend
) -> None:
    x, y = open_stores(), open_stores()
    x.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(4)])
    mark = x.high_water("run0000r")
    owners = {x: x.register_worker(C, run="run0000r"), y: y.register_worker(C, run="run0000r")}
    for n in range(4):  # four passes, the pages leased by either worker in turn
        store = x if n % 2 == 0 else y
        if n:
            store.recrawl(C)
        got = store.lease(C, owners[store], 10, 60)
        outs = [PageOutcome(g, "done", 200, records=[rec(g.url[-1], str(n))]) for g in got]
        assert store.commit_pages(C, outs) == [None] * 4
    before = x.since(C, mark), x.stats(C), {w.owner: w.pages for w in x.workers(C)}
    assert before[0] == RunFigures(16, {"record.updated": 4})
    assert x.fold_grants(C) == 12  # one row a page, not one a page and worker
    assert backend.count("lease_grants") == 4
    assert (x.since(C, mark), x.stats(C), {w.owner: w.pages for w in x.workers(C)}) == before
