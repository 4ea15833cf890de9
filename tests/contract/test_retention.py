"""The Store contract for a store that stays small: old outbox events pruned once no
endpoint still has them to deliver, and the database compacted."""

from __future__ import annotations

from crashsafe.store import DeliveryResult, NewUrl, Pruned, RecordRow, Store
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
