"""The Store contract for recrawls, gone records, files and the outbox's deliveries."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable

import pytest

from crashsafe.cli.common import run_line
from crashsafe.store import (
    DeliveryResult,
    FileRow,
    HighWater,
    NewUrl,
    PageOutcome,
    RecordRow,
    RunFigures,
    Store,
)
from tests.clock import ManualClock
from tests.contract.conftest import Backend

C = "c"
HOOK = "http://127.0.0.1:9/hook"
_fresh = itertools.count()


def rec(key: str, price: str) -> RecordRow:
    return RecordRow.build(id=f"id-{key}", source="s", key=key, url=None, data={"price": price})


def crawl_page(store: Store, url: str, records: list[RecordRow], **kw: object) -> None:
    """Lease ``url`` and commit it done with ``records``."""
    owner = store.register_worker()
    leased = store.lease(C, owner, 100, 60)
    [lease] = [x for x in leased if x.url == url]
    store.release(C, [(x, False) for x in leased if x.url != url])
    out = PageOutcome(lease, "done", 200, records=records, **kw)  # type: ignore[arg-type]
    assert store.commit_pages(C, [out]) == [None]


def versions(
    store: Store, since: float | None = None, changed_only: bool = False
) -> dict[str, int]:
    return {
        r.key + ("(gone)" if r.gone_at else ""): r.version
        for r in store.iter_records(C, since=since, changed_only=changed_only)
    }


def events(store: Store) -> list[tuple[str, int, str]]:
    """Every outbox event of the crawl, through a fresh endpoint's backlog."""
    endpoint = store.endpoint(C, f"{HOOK}/{next(_fresh)}")
    owner = store.register_worker()
    leased = store.lease_deliveries(endpoint.id, owner, 1000, 60)
    return [(d.record_id.removeprefix("id-"), d.version, d.type) for d in leased]


def test_a_recrawl_versions_changed_records_and_marks_missing_ones_gone(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(store, "http://a/1", [rec("a", "1"), rec("b", "2"), rec("c", "3")])
    clock.advance(10)
    started = clock.now
    assert store.recrawl(C).requeued == 1
    assert store.stats(C).pending == 1
    crawl_page(store, "http://a/1", [rec("a", "1"), rec("b", "20")])  # c is no longer there
    assert store.finish_pass(C) == 1
    assert store.finish_pass(C) == 0  # once

    assert versions(store) == {"a": 1, "b": 2}  # a live export has no gone record
    assert versions(store, since=started) == {"b": 2, "c(gone)": 2}
    gone = next(r for r in store.iter_records(C, since=started) if r.gone_at)
    assert gone.gone_at == gone.last_changed == pytest.approx(started, abs=1e-3)
    assert gone.data == {"price": "3"}
    stats = store.effect_stats(C)
    assert (stats.passes, stats.gone, stats.changed_last_pass, stats.versions) == (2, 1, 2, 5)
    assert store.stats(C).records == 2
    assert sorted(events(store)) == [
        ("a", 1, "record.created"),
        ("b", 1, "record.created"),
        ("b", 2, "record.updated"),
        ("c", 1, "record.created"),
        ("c", 2, "record.gone"),
    ]

    # Pass 3: c is back (a new version), b unchanged (no new version, no event).
    clock.advance(10)
    assert store.recrawl(C).number == 3
    crawl_page(store, "http://a/1", [rec("a", "1"), rec("b", "20"), rec("c", "3")])
    assert store.finish_pass(C) == 0
    assert versions(store) == {"a": 1, "b": 2, "c": 3}
    assert ("c", 3, "record.updated") in events(store)
    assert len(events(store)) == 6


def test_changed_only_leaves_out_records_first_seen_in_the_window(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    clock.advance(5)
    since = clock.now
    store.recrawl(C)
    crawl_page(store, "http://a/1", [rec("a", "2"), rec("new", "1")])
    assert versions(store, since=since) == {"a": 2, "new": 1}
    assert versions(store, since=since, changed_only=True) == {"a": 2}


def test_a_page_now_gone_takes_its_records_with_it(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    crawl_page(store, "http://a/2", [rec("b", "1")])
    clock.advance(1)
    store.recrawl(C)
    owner = store.register_worker()
    leases = {x.url: x for x in store.lease(C, owner, 10, 60)}
    outs = [
        PageOutcome(leases["http://a/1"], "done", 404),  # now 404: done, no records
        PageOutcome(leases["http://a/2"], "done", 200, records=[rec("b", "1")]),
    ]
    assert store.commit_pages(C, outs) == [None, None]
    assert store.finish_pass(C) == 1
    assert versions(store, since=clock.now) == {"a(gone)": 2}
    assert store.effect_stats(C).gone == 1


def test_recrawl_older_than_requeues_only_pages_done_long_enough_ago(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/old"), NewUrl("http://a/new")])
    crawl_page(store, "http://a/old", [])
    clock.advance(3600)
    crawl_page(store, "http://a/new", [])
    clock.advance(60)
    assert store.recrawl(C, older_than=7200).requeued == 0
    assert store.effect_stats(C).passes == 1  # no pass begins when nothing is requeued
    started = store.recrawl(C, older_than=1800)
    assert (started.number, started.requeued) == (2, 1)
    assert [x.url for x in store.lease(C, store.register_worker(), 10, 60)] == ["http://a/old"]


def test_a_record_that_moves_to_a_page_fetched_later_is_not_gone(
    store: Store, clock: ManualClock
) -> None:
    """Page 1 of a listing no longer shows a (items shifted); page 2, fetched after it,
    does: a is neither gone nor a new version."""
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    crawl_page(store, "http://a/2", [rec("b", "1")])
    clock.advance(1)
    store.recrawl(C)
    crawl_page(store, "http://a/1", [])
    assert store.finish_pass(C) == 0  # page 2 is pending: the pass is not complete
    crawl_page(store, "http://a/2", [rec("a", "1")])  # a is on page 2 now, b is gone
    assert store.finish_pass(C) == 1
    assert versions(store) == {"a": 1}
    assert sorted(events(store)) == [
        ("a", 1, "record.created"), ("b", 1, "record.created"), ("b", 2, "record.gone"),
    ]  # fmt: skip


def test_a_page_not_fetched_again_keeps_its_records(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl("http://a/old"), NewUrl("http://a/new")])
    crawl_page(store, "http://a/old", [rec("a", "1")])
    clock.advance(3600)
    crawl_page(store, "http://a/new", [rec("b", "1")])
    clock.advance(60)
    assert store.recrawl(C, older_than=1800).requeued == 1  # only /old
    crawl_page(store, "http://a/old", [])
    assert store.finish_pass(C) == 1
    assert versions(store) == {"b": 1}


def test_files_are_counted_once_per_content(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    f = FileRow("ab" * 32, 10, "image/png", "http://a/img.png")
    crawl_page(store, "http://a/1", [], files=[f, f])
    crawl_page(store, "http://a/2", [], files=[FileRow("ab" * 32, 10, None, "http://b/x")])
    stats = store.effect_stats(C)
    assert (stats.files, stats.file_bytes) == (1, 10)


def test_an_endpoint_gets_its_backlog_and_every_later_event(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    endpoint = store.endpoint(C, HOOK)
    assert store.endpoint(C, HOOK).id == endpoint.id  # the same endpoint again
    crawl_page(store, "http://a/2", [rec("b", "1")])
    owner = store.register_worker()
    leased = store.lease_deliveries(endpoint.id, owner, 10, 60)
    assert [(d.record_id, d.version, d.type, d.attempts) for d in leased] == [
        ("id-a", 1, "record.created", 1),
        ("id-b", 1, "record.created", 1),
    ]
    assert json.loads(leased[0].data) == {"price": "1"}
    store.finish_deliveries(owner, [DeliveryResult(d, "delivered", 200) for d in leased])
    assert store.lease_deliveries(endpoint.id, owner, 10, 60) == []
    assert store.deliveries_due(endpoint.id) is None
    assert store.effect_stats(C).deliveries == {"delivered": 2}


def test_events_are_written_once_a_crawl_has_an_endpoint_and_none_is_lost(
    store: Store, backend: Backend, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(store, "http://a/1", [rec("a", "1"), rec("b", "2")])
    assert backend.count("outbox") == 0  # no endpoint: the records are not written twice
    assert store.effect_stats(C).events == 2  # (one per version, written or not)
    assert [v[:2] for v in store.record_versions(C, "id-a")] == [(1, "record.created")]
    clock.advance(10)
    store.recrawl(C)
    crawl_page(store, "http://a/1", [rec("a", "10"), rec("b", "2")])  # a changes
    # a's change writes its event, and first the one of the version it leaves.
    assert [(v, kind, data) for v, kind, _, data in store.record_versions(C, "id-a")] == [
        (1, "record.created", {"price": "1"}),
        (2, "record.updated", {"price": "10"}),
    ]
    assert backend.count("outbox") == 2

    endpoint = store.endpoint(C, HOOK)  # the first: b's event is written with it
    assert backend.count("outbox") == 3
    owner = store.register_worker()
    leased = store.lease_deliveries(endpoint.id, owner, 10, 60)
    assert sorted((d.record_id, d.version, d.type, json.loads(d.data)) for d in leased) == [
        ("id-a", 1, "record.created", {"price": "1"}),
        ("id-a", 2, "record.updated", {"price": "10"}),
        ("id-b", 1, "record.created", {"price": "2"}),
    ]
    store.enqueue(C, [NewUrl("http://a/2")])
    crawl_page(store, "http://a/2", [rec("c", "3")])  # with an endpoint: written at once
    assert [
        (d.record_id, d.version) for d in store.lease_deliveries(endpoint.id, owner, 10, 60)
    ] == [("id-c", 1)]
    assert store.effect_stats(C).events == backend.count("outbox") == 4
    store.endpoint(C, f"{HOOK}/2")  # a second endpoint finds every event written
    assert backend.count("outbox") == 4
    # c changes: its version 1 had its event already (written with it): not again.
    clock.advance(10)
    store.recrawl(C)
    crawl_page(store, "http://a/2", [rec("c", "30")])
    assert [v[:2] for v in store.record_versions(C, "id-c")] == [
        (1, "record.created"), (2, "record.updated"),
    ]  # fmt: skip
    assert store.effect_stats(C).events == backend.count("outbox") == 5


def test_a_first_endpoint_added_while_pages_commit_misses_no_event(
    open_stores: Callable[[], Store], backend: Backend
) -> None:
    # Pages commit on one connection while another adds the crawl's first endpoint: each
    # record's event is written once, by the commit or with the endpoint, and reaches it.
    pages = 150
    writer, adder = open_stores(), open_stores()
    writer.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(pages)])
    owner = writer.register_worker()
    added: list[int] = []

    def commit_all() -> None:
        for _ in range(pages):
            [lease] = writer.lease(C, owner, 1, 60)
            page = PageOutcome(lease, "done", 200, records=[rec(lease.url, "1")])
            assert writer.commit_pages(C, [page]) == [None]
            if len(added) == 0 and lease.url.endswith("/40"):
                started.set()

    started = threading.Event()
    thread = threading.Thread(target=commit_all)
    thread.start()
    assert started.wait(60)
    added.append(adder.endpoint(C, HOOK).id)  # while the writer goes on
    thread.join(120)
    assert not thread.is_alive()
    assert backend.count("outbox") == pages
    leased = adder.lease_deliveries(added[0], adder.register_worker(), 1000, 60)
    assert sorted(d.record_id for d in leased) == sorted(f"id-http://a/{i}" for i in range(pages))


def test_deliveries_are_leased_and_answers_fenced(
    open_stores: Callable[[], Store], clock: ManualClock
) -> None:
    a, b = open_stores(), open_stores()
    a.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(a, "http://a/1", [rec("a", "1")])
    endpoint = a.endpoint(C, HOOK)
    owner_a, owner_b = a.register_worker(), b.register_worker()
    [first] = a.lease_deliveries(endpoint.id, owner_a, 10, 30)
    assert b.lease_deliveries(endpoint.id, owner_b, 10, 30) == []  # leased to a
    assert b.deliveries_due(endpoint.id) == 30
    clock.advance(31)  # a's lease lapses (a was killed, say): b takes it, an attempt more
    [second] = b.lease_deliveries(endpoint.id, owner_b, 10, 30)
    assert second.attempts == 2
    # a's late answer is refused; b's retry is stored.
    a.finish_deliveries(owner_a, [DeliveryResult(first, "failed", 500, "HTTP 500")])
    b.finish_deliveries(owner_b, [DeliveryResult(second, "retry", 503, "HTTP 503", 5.0)])
    assert b.deliveries_due(endpoint.id) == 5
    clock.advance(5)
    [third] = a.lease_deliveries(endpoint.id, owner_a, 10, 30)
    a.finish_deliveries(owner_a, [DeliveryResult(third, "failed", 500, "HTTP 500")])
    [failed] = a.failed_deliveries(C)
    assert (failed.endpoint_url, failed.record_id, failed.attempts, failed.status) == (
        HOOK, "id-a", 3, 500,
    )  # fmt: skip
    assert a.replay_deliveries(C) == 1
    [again] = a.lease_deliveries(endpoint.id, owner_a, 10, 30)
    assert again.attempts == 1
    # "delivered" holds whoever says it: the lease it came on may have lapsed.
    b.finish_deliveries(owner_b, [DeliveryResult(second, "delivered", 200)])
    assert a.failed_deliveries(C) == [] and a.deliveries_due(endpoint.id) is None


def test_a_disabled_endpoint_leases_nothing_until_replayed(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    endpoint = store.endpoint(C, HOOK)
    owner = store.register_worker()
    [d] = store.lease_deliveries(endpoint.id, owner, 10, 30)
    store.disable_endpoint(endpoint.id, "410 Gone")
    store.finish_deliveries(owner, [DeliveryResult(d, "retry", 410, "410 Gone", 0.0)])
    assert store.endpoint(C, HOOK).disabled_why == "410 Gone"
    assert store.lease_deliveries(endpoint.id, owner, 10, 30) == []
    store.replay_deliveries(C, HOOK)
    assert store.endpoint(C, HOOK).disabled_at is None
    assert len(store.lease_deliveries(endpoint.id, owner, 10, 30)) == 1


def test_an_answer_from_before_a_replay_is_refused(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    endpoint = store.endpoint(C, HOOK)
    owner = store.register_worker()
    [first] = store.lease_deliveries(endpoint.id, owner, 10, 30)
    store.finish_deliveries(owner, [DeliveryResult(first, "failed", 500, "HTTP 500")])
    assert store.replay_deliveries(C) == 1
    [again] = store.lease_deliveries(endpoint.id, owner, 10, 30)
    assert (again.attempts, again.lease) == (first.attempts, first.lease + 1) == (1, 2)
    # The first answer again (a retried call, say): same owner, same attempt, old lease.
    store.finish_deliveries(owner, [DeliveryResult(first, "failed", 500, "HTTP 500")])
    assert store.failed_deliveries(C) == []
    store.finish_deliveries(owner, [DeliveryResult(again, "retry", 503, "HTTP 503", 0.0)])
    assert store.deliveries_due(endpoint.id) == 0


def test_a_page_robots_txt_now_disallows_keeps_its_records(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    clock.advance(1)
    store.recrawl(C)
    [lease] = store.lease(C, store.register_worker(), 10, 60)
    skipped = PageOutcome(lease, "skipped", error="disallowed by robots.txt")
    assert store.commit_pages(C, [skipped]) == [None]
    assert store.finish_pass(C) == 0  # never fetched in this pass: nothing known of a
    assert versions(store) == {"a": 1}


def test_a_recrawl_begun_before_the_last_pass_ended_loses_no_gone_record(
    store: Store, clock: ManualClock
) -> None:
    """Page 1 answers 404 in pass 2; pass 3 begins before pass 2 is complete and does not
    queue page 1 again (fetched too recently): a is gone when pass 3 completes."""
    pages = ["http://a/1", "http://a/2", "http://a/3"]
    store.enqueue(C, [NewUrl(u) for u in pages])
    for url, key in zip(pages, "abc", strict=True):
        crawl_page(store, url, [rec(key, "1")])
    clock.advance(1000)
    store.recrawl(C)
    owner = store.register_worker()
    leases = {x.url: x for x in store.lease(C, owner, 10, 60)}
    page3 = PageOutcome(leases["http://a/3"], "done", 200, records=[rec("c", "1")])
    assert store.commit_pages(C, [page3]) == [None]
    clock.advance(500)
    assert store.commit_pages(C, [PageOutcome(leases["http://a/1"], "done", 404)]) == [None]
    clock.advance(100)
    assert store.recrawl(C, older_than=300).requeued == 1  # page 3; page 1 is too recent
    page2 = PageOutcome(leases["http://a/2"], "done", 200, records=[rec("b", "1")])
    assert store.commit_pages(C, [page2]) == [None]
    assert store.finish_pass(C) == 0  # page 3 is pending
    crawl_page(store, "http://a/3", [rec("c", "1")])
    assert store.finish_pass(C) == 1
    assert versions(store) == {"b": 1, "c": 1}


def test_a_temporary_redirect_keeps_the_records_a_permanent_one_does_not(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    crawl_page(store, "http://a/1", [rec("a", "1")])
    crawl_page(store, "http://a/2", [rec("b", "1")])
    clock.advance(1)
    store.recrawl(C)
    leases = {x.url: x for x in store.lease(C, store.register_worker(), 10, 60)}
    why = "redirect to http://b/ not followed"
    outs = [PageOutcome(leases["http://a/1"], "done", 302, why),
            PageOutcome(leases["http://a/2"], "done", 301, why)]  # fmt: skip
    assert store.commit_pages(C, outs) == [None, None]
    assert store.finish_pass(C) == 1
    assert versions(store) == {"a": 1}


def test_a_runs_figures_count_what_came_after_its_mark(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2"), NewUrl("http://a/3")])
    crawl_page(store, "http://a/1", [rec("a", "1")])  # before the run
    mark = store.high_water()  # (no run: every worker's work counts)
    crawl_page(store, "http://a/2", [rec("b", "1"), rec("a", "2")])
    owner = store.register_worker()
    [in_flight] = [x for x in store.lease(C, owner, 10, 60) if x.url == "http://a/3"]
    figures = store.since(C, mark)  # the lease in flight made no request yet
    assert (figures.requests, figures.events) == (1, {"record.created": 1, "record.updated": 1})
    assert run_line(figures) == "this run: 1 requests, 1 new records, 1 changed"
    store.release(C, [(in_flight, False)])  # given back unfetched: still none
    assert store.since(C, mark).requests == 1


def test_two_runs_on_one_crawl_each_count_their_own_work(
    open_stores: Callable[[], Store], clock: ManualClock
) -> None:
    # Two crawl commands on one database: "this run" is each one's workers' own work
    # (#22 item 5: both printed the whole crawl's figures).
    a, b = open_stores(), open_stores()
    a.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(3)])
    marks = {"a": a.high_water("run0000a"), "b": b.high_water("run0000b")}
    clock.advance(1)
    owners = {"a": a.register_worker(C, run="run0000a"), "b": b.register_worker(C, run="run0000b")}
    for name, store, urls in (("a", a, ["http://a/0", "http://a/1"]), ("b", b, ["http://a/2"])):
        leased = store.lease(C, owners[name], 10, 60)
        leases = [x for x in leased if x.url in urls]
        store.release(C, [(x, False) for x in leased if x.url not in urls])
        outs = [PageOutcome(x, "done", 200, records=[rec(x.url[-1] + name, "1")]) for x in leases]
        assert store.commit_pages(C, outs) == [None] * len(urls)
    assert a.since(C, marks["a"]) == RunFigures(2, {"record.created": 2})
    assert b.since(C, marks["b"]) == RunFigures(1, {"record.created": 1})
    # a mark without a run counts every worker's work
    assert a.since(C, HighWater(marks["a"].grants, marks["a"].at)).requests == 3
