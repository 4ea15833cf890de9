"""Steering (#27 item 2): pause and resume a crawl or an origin, cancel, the audit trail;
every backend the same."""

from __future__ import annotations

import threading
from collections.abc import Callable

from crashsafe.store import NewUrl, PageOutcome, Politeness, Store, open_store
from tests import pg
from tests.clock import ManualClock
from tests.helpers import wait_for

C = "c"


def urls(origin: str, n: int, priority: int = 0) -> list[NewUrl]:
    return [NewUrl(f"{origin}/{i}", priority=priority) for i in range(n)]


def leased(store: Store, owner: str, limit: int = 100, **kw: object) -> list[str]:
    return sorted(x.url for x in store.lease(C, owner, limit, 60, **kw))  # type: ignore[arg-type]


def test_a_paused_crawl_grants_nothing_until_resumed(store: Store) -> None:
    store.enqueue(C, urls("http://a", 3))
    owner = store.register_worker(C)
    [held] = store.lease(C, owner, 1, 60)
    assert store.pause(C, actor="ann") is True
    assert store.pause(C, actor="bob") is False  # paused already: nothing changes
    assert store.lease(C, owner, 10, 60) == []
    assert store.lease(C, owner, 10, 60, politeness=Politeness(per_host=4)) == []
    # What was leased before the pause still commits; the commit leases nothing more.
    errors, more = store.commit_and_lease(
        C, [PageOutcome(held, "done", 200)], owner=owner, limit=5, lease_seconds=60
    )
    assert errors == [None] and more == []
    control = store.control(C)
    assert control.paused and control.paused_by == "ann" and control.paused_since
    assert store.resume(C, actor="bob") is True and store.resume(C, actor="bob") is False
    assert not store.control(C).paused
    assert len(store.lease(C, owner, 10, 60)) == 2
    actions = [(a.action, a.target, a.actor) for a in reversed(store.audit(C))]
    assert actions == [("pause", None, "ann"), ("resume", None, "bob")]


def test_a_paused_origin_is_passed_over_and_the_others_go_on(store: Store) -> None:
    store.enqueue(C, urls("http://a", 3, priority=5) + urls("http://b", 2))
    owner = store.register_worker(C)
    assert store.pause(C, actor="ann", origin="http://a")
    assert leased(store, owner) == ["http://b/0", "http://b/1"]
    # Links to it found meanwhile wait too, with or without politeness.
    store.enqueue(C, [NewUrl("http://a/new", priority=9), NewUrl("http://b/new")])
    assert leased(store, owner, politeness=Politeness(per_host=8)) == ["http://b/new"]
    assert leased(store, owner) == []
    [origin] = store.control(C).origins
    assert (origin.origin, origin.by) == ("http://a", "ann")
    assert store.resume(C, actor="ann", origin="http://a")
    assert store.control(C).origins == ()
    assert leased(store, owner) == ["http://a/0", "http://a/1", "http://a/2", "http://a/new"]


def test_more_new_links_of_a_paused_origin_than_a_claim_scans(store: Store) -> None:
    """Found after the pause and first in line: never granted, and each claim moves a
    bounded number of them out of the way (8 scans of 8 x limit + 16), so the rest of
    the crawl is reached after a few claims, not never."""
    owner = store.register_worker(C)
    store.pause(C, actor="ann", origin="http://a")
    store.enqueue(C, urls("http://a", 1000, priority=9) + urls("http://b", 2))
    got: list[str] = []
    for _ in range(5):  # 1000 / (8 x 32) claims at most
        got += leased(store, owner, 2)
    assert got == ["http://b/0", "http://b/1"]
    store.resume(C, actor="ann", origin="http://a")
    assert len(store.lease(C, owner, 2000, 60)) == 1000


def test_a_paused_origins_backoffs_are_kept(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, urls("http://a", 1))
    owner = store.register_worker(C)
    [lease] = store.lease(C, owner, 1, 60)
    store.commit_pages(C, [PageOutcome(lease, "retry", 503, "busy", retry_in=100)])
    store.pause(C, actor="ann", origin="http://a")
    clock.advance(10)
    store.resume(C, actor="ann", origin="http://a")
    assert leased(store, owner) == []  # still backing off: 90 s to go
    clock.advance(91)
    assert leased(store, owner) == ["http://a/0"]


def test_cancel_asks_the_live_workers_of_the_crawl(open_stores: Callable[[], Store]) -> None:
    one, two, other = open_stores(), open_stores(), open_stores()
    a, b = one.register_worker(C), two.register_worker(C)
    other.register_worker("another crawl")
    assert one.cancel(C, actor="ann") == 2
    assert one.control(C, a).stop_asked_by == "ann" and two.control(C, b).stop_asked_by == "ann"
    late = open_stores()
    assert late.control(C, late.register_worker(C)).stop_asked_by is None  # started after
    [entry] = one.audit(C)
    assert (entry.action, entry.actor, entry.detail) == ("cancel", "ann", "2 worker(s)")


def test_retry_is_recorded_with_who_asked(store: Store) -> None:
    store.enqueue(C, urls("http://a", 1))
    owner = store.register_worker(C)
    [lease] = store.lease(C, owner, 1, 60)
    store.commit_pages(C, [PageOutcome(lease, "failed", 500, "boom")])
    assert store.retry_failed(C, actor="ann") == 1
    [entry] = store.audit(C)
    assert (entry.action, entry.actor, entry.detail) == ("retry", "ann", "1 URL(s)")


def test_lapsed_leases_of_a_paused_origin_do_not_block_the_rest(
    open_stores: Callable[[], Store], clock: ManualClock
) -> None:
    """A hung worker's leases of a paused origin lapse: claims give them back and move
    them aside instead of scanning them again and again (they came first in every scan)."""
    hung, store = open_stores(), open_stores()
    store.enqueue(C, urls("http://a", 300, priority=5) + urls("http://b", 3))
    assert len(hung.lease(C, hung.register_worker(C), 300, 60)) == 300
    store.pause(C, actor="ann", origin="http://a")
    clock.advance(61)  # the hung worker's leases lapse (it is still "alive")
    owner = store.register_worker(C)
    got: list[str] = []
    for _ in range(2):
        got += leased(store, owner, 4)
    assert got == ["http://b/0", "http://b/1", "http://b/2"]
    store.resume(C, actor="ann", origin="http://a")
    again = store.lease(C, owner, 500, 60)
    assert len(again) == 300 and {x.attempts for x in again} == {1}  # the lapsed grant counts


def test_an_action_waits_for_the_claims_under_way(pg_url: str) -> None:
    """PostgreSQL: a claim reads the gate, then takes more statements; a pause committed
    in between must not let it grant after the pause has returned. So an action waits
    for the claims that read the gate before it. (SQLite needs no test of its own: its
    claims and actions take the database's one write lock in turn.)"""
    store = open_store(pg_url)
    try:
        store.enqueue(C, urls("http://a", 3))
        store.pause(C, actor="ann")
        store.resume(C, actor="ann")
        returned = threading.Event()
        with pg.connect(pg_url) as claim:
            claim.autocommit = False
            claim.execute("SELECT 1 FROM controls WHERE crawl = %s", (C,))  # (a claim's gate)
            pause = threading.Thread(target=lambda: (store.pause(C, actor="bob"), returned.set()))
            pause.start()
            wait_for(lambda: _waiting_locks(pg_url) > 0)  # it waits for the claim...
            assert not returned.is_set()
            claim.commit()  # ...until the claim commits
        pause.join(timeout=30)
        assert returned.is_set() and store.control(C).paused_by == "bob"
    finally:
        store.close()


def _waiting_locks(url: str) -> int:
    with pg.connect(url) as db:
        return int(db.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0])
