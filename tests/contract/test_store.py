"""The Store contract: every backend must pass these unchanged."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from crashsafe.ids import record_id
from crashsafe.store import (
    STALE,
    Backoff,
    CookieRow,
    Lease,
    NewUrl,
    PageOutcome,
    Politeness,
    RecordRow,
    Store,
)
from tests.clock import ManualClock
from tests.contract.conftest import PYTHON, Backend, worker_script
from tests.helpers import wait_for, wait_for_line

C = "c"


def rec(key: str, price: str) -> RecordRow:
    return RecordRow.build(id=f"id-{key}", source="s", key=key, url=None, data={"price": price})


def lease_one(store: Store, url: str, owner: str | None = None) -> Lease:
    owner = owner or store.register_worker()
    [lease] = [x for x in store.lease(C, owner, 100, 60) if x.url == url]
    return lease


def test_enqueue_known_url_is_a_no_op(store: Store) -> None:
    assert store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")]) == 2
    assert store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/3")]) == 1
    assert store.stats(C).pending == 3


def test_crawls_are_scoped_by_name(store: Store) -> None:
    store.enqueue("one", [NewUrl("http://a/1")])
    store.enqueue("two", [NewUrl("http://a/1")])
    owner = store.register_worker()
    assert [x.url for x in store.lease("one", owner, 10, 60)] == ["http://a/1"]
    assert store.stats("two").pending == 1
    assert store.crawls() == ["one", "two"]


def test_lease_grants_at_most_limit_and_never_twice(open_stores: Callable[[], Store]) -> None:
    a, b = open_stores(), open_stores()
    a.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(10)])
    first = a.lease(C, a.register_worker(), 4, 60)
    second = b.lease(C, b.register_worker(), 100, 60)
    assert len(first) == 4 and len(second) == 6
    assert not {x.url for x in first} & {x.url for x in second}
    assert a.lease(C, a.register_worker(), 100, 60) == []
    assert a.stats(C).leased == 10 and a.stats(C).lease_grants == 10


@contextmanager
def worker_process(url: str, body: str) -> Iterator[str]:
    """A live worker process on ``url`` (see ``worker_script``), SIGKILLed on exit;
    yields what it printed."""
    proc = subprocess.Popen(
        [PYTHON, "-c", worker_script(url, body)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        try:  # a bounded wait: a busy machine may take seconds to start it, never forever
            line = wait_for_line(proc.stdout, "\n", timeout=60)
        except (TimeoutError, EOFError) as exc:
            proc.kill()
            raise AssertionError(f"the worker printed nothing: {proc.stderr.read()}") from exc
        yield line.strip()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def test_expired_lease_is_leased_again(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    owner = store.register_worker()
    assert len(store.lease(C, owner, 1, 5)) == 1
    assert store.lease(C, owner, 1, 60) == []
    clock.advance(5)
    assert store.lease(C, owner, 1, 60) == []  # lapses after, not at, its expiry
    clock.advance(0.001)
    again = store.lease(C, owner, 1, 60)
    assert [x.url for x in again] == ["http://a/1"]
    stats = store.stats(C)
    assert stats.lease_grants == 2
    assert stats.repeated == 1  # the lapsed grant counts as a repeated request


def test_renew_keeps_a_lease(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    owner = store.register_worker()
    leases = store.lease(C, owner, 1, 10)
    clock.advance(8)
    assert store.renew(C, leases, 60) == []  # none lost: 60 s from now
    clock.advance(30)
    assert store.lease(C, owner, 1, 60) == []
    clock.advance(31)
    assert len(store.lease(C, owner, 1, 60)) == 1


def test_dead_worker_leases_come_back_at_once(backend: Backend, store: Store) -> None:
    store.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(5)])
    with worker_process(backend.url, "out = len(s.lease('c', o, 3, 3600))") as leased:
        assert leased == "3"
        assert store.reclaim_dead_workers(C) == 0  # alive: its leases stay
        assert len(store.lease(C, store.register_worker(), 10, 60)) == 2
    # Leases were for an hour; the liveness lock died with the process (on PostgreSQL once
    # the server has seen the session's socket close: a moment after the kill).
    reclaimed: list[int] = []
    wait_for(lambda: reclaimed.append(store.reclaim_dead_workers(C)) or sum(reclaimed) == 3)
    assert store.stats(C).pending == 3


def test_a_dead_workers_urls_wait_a_backoff_before_they_are_leased_again(
    backend: Backend, store: Store, clock: ManualClock
) -> None:
    """The first time at once; once tried, after a retry's backoff, so that in a crash
    loop the URLs a dying worker held are not the first its restart takes again (that
    spent every attempt of the same URLs)."""
    store.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(5)])
    backoff = Backoff(base=10, cap=300)
    owner = store.register_worker()
    # (Two rounds: the worker process runs on the real clock, which the test's moves past.)
    for attempts, wait in ((1, 0), (2, 10)):
        with worker_process(backend.url, "out = len(s.lease('c', o, 2, 3600))") as leased:
            assert leased == "2"  # http://a/0 and /1: the first in line
        reclaimed: list[int] = []  # (PostgreSQL frees the lock a moment after the kill)
        wait_for(
            lambda r=reclaimed: (
                r.append(store.reclaim_dead_workers(C, backoff=backoff)) or sum(r) == 2
            )
        )
        got = store.lease(C, owner, 10, 60)
        if wait:  # tried before: they wait their backoff (x 1 to 1.5), the others go first
            assert sorted(x.url for x in got) == ["http://a/2", "http://a/3", "http://a/4"]
            clock.advance(wait - 0.5)
            assert store.lease(C, owner, 10, 60) == []
            clock.advance(wait / 2 + 1)
            got += store.lease(C, owner, 10, 60)
        assert sorted(x.url for x in got) == [f"http://a/{i}" for i in range(5)]
        assert [x.attempts for x in got if x.url < "http://a/2"] == [attempts] * 2
        store.release(C, [(x, False) for x in got])  # unfetched: no attempt


def test_commit_page_stores_records_links_and_done_together(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    lease = lease_one(store, "http://a/1")
    out = PageOutcome(
        lease, "done", 200, records=[rec("k1", "1.00")], links=[NewUrl("http://a/2", 1)]
    )
    assert store.commit_pages(C, [out]) == [None]
    stats = store.stats(C)
    assert (stats.done, stats.pending, stats.records, stats.requests) == (1, 1, 1, 1)


def test_a_request_is_leased_with_what_it_was_stored_with(store: Store) -> None:
    stored = '{"body":"q=1","method":"POST"}'
    post = NewUrl("http://a/search#POST:1f2e", 0, "parse_search", 0, stored)
    store.enqueue(C, [NewUrl("http://a/search"), post])
    leases = {x.url: x for x in store.lease(C, store.register_worker(), 10, 60)}
    assert leases["http://a/search"].request is None
    assert leases["http://a/search#POST:1f2e"].request == stored
    assert leases["http://a/search#POST:1f2e"].callback == "parse_search"
    # a link found by a page keeps its request too
    link = NewUrl("http://a/search#POST:9a9a", 1, None, 0, '{"method":"POST"}')
    page = PageOutcome(leases["http://a/search"], "done", 200, links=[link])
    assert store.commit_pages(C, [page]) == [None]
    [again] = [x for x in store.lease(C, store.register_worker(), 10, 60) if x.url == link.url]
    assert again.request == '{"method":"POST"}'


def cookie(name: str, value: str, url: str = "http://a/login") -> CookieRow:
    return CookieRow("a", "/", name, url, f"{name}={value}; Path=/")


def test_cookies_are_stored_with_a_done_page_the_last_one_wins(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    owner = store.register_worker()
    one, two = sorted(store.lease(C, owner, 2, 60), key=lambda x: x.url)
    pages = [
        PageOutcome(one, "done", 200, cookies=[cookie("session", "s1"), cookie("lang", "fr")]),
        PageOutcome(two, "retry", 503, "HTTP 503", cookies=[cookie("junk", "x")]),
    ]
    assert (one.cookies, two.cookies) == (0, 0)  # no cookie stored when they were granted
    assert store.commit_pages(C, pages) == [None, None]
    first = store.cookies(C)
    assert sorted(first.rows) == [
        ("http://a/login", "lang=fr; Path=/"),
        ("http://a/login", "session=s1; Path=/"),
    ]  # a page that is not done stores none
    assert first.version > 0
    [two] = store.lease(C, owner, 1, 60)
    assert two.cookies == first.version  # a lease says how new the stored cookies are
    page = PageOutcome(two, "done", 200, cookies=[cookie("session", "s2", "http://a/2")])
    assert store.commit_pages(C, [page]) == [None]
    second = store.cookies(C)
    assert sorted(second.rows) == [
        ("http://a/2", "session=s2; Path=/"),
        ("http://a/login", "lang=fr; Path=/"),
    ]
    assert second.version > first.version
    assert (store.cookies("another crawl").rows, store.cookies("another crawl").version) == (
        [],
        0,
    )


def test_a_stale_page_stores_no_cookie(open_stores: Callable[[], Store]) -> None:
    a, old, b, _ = regranted(open_stores)
    page = PageOutcome(old, "done", 200, cookies=[cookie("session", "stale")])
    assert a.commit_pages(C, [page]) == [STALE]
    assert b.cookies(C).rows == [] and b.cookies(C).version == 0


def test_upsert_writes_only_changes(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(3)])
    owner = store.register_worker()
    l1, l2, l3 = store.lease(C, owner, 3, 60)
    store.commit_pages(C, [PageOutcome(l1, "done", 200, records=[rec("k", "1.00")])])
    [first] = store.iter_records(C)
    clock.advance(1)
    store.commit_pages(C, [PageOutcome(l2, "done", 200, records=[rec("k", "1.00")])])
    [same] = store.iter_records(C)
    assert same == first  # unchanged content writes nothing
    clock.advance(1)
    store.commit_pages(C, [PageOutcome(l3, "done", 200, records=[rec("k", "2.00")])])
    [changed] = store.iter_records(C)
    assert changed.version == 2 and changed.data == {"price": "2.00"}
    assert changed.first_seen == first.first_seen == pytest.approx(clock.now - 2)
    assert changed.last_changed == pytest.approx(clock.now)
    assert list(store.iter_records(C, since=changed.last_changed)) == [changed]
    assert list(store.iter_records(C, since=changed.last_changed + 1)) == []


def test_failed_commit_leaves_neither_records_nor_done_mark(backend: Backend, store: Store) -> None:
    urls = ["http://a/ok1", "http://a/bad", "http://a/ok2"]
    store.enqueue(C, [NewUrl(u) for u in urls])
    owner = store.register_worker()
    leases = {x.url: x for x in store.lease(C, owner, 3, 60)}
    backend.fail_done_mark("http://a/bad")
    outcomes = [
        PageOutcome(leases[u], "done", 200, records=[rec(u, "1")], links=[NewUrl(u + "/child", 1)])
        for u in urls
    ]
    errors = store.commit_pages(C, outcomes)
    assert errors[0] is None and errors[2] is None
    assert errors[1] is not None and "injected failure" in errors[1]
    keys = {r.key for r in store.iter_records(C)}
    assert keys == {"http://a/ok1", "http://a/ok2"}  # the bad page's record rolled back
    stats = store.stats(C)
    assert stats.done == 2 and stats.leased == 1
    assert stats.pending == 2  # the good pages' links only


def test_retry_then_dead_letter_then_requeue(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    owner = store.register_worker()
    [lease] = store.lease(C, owner, 1, 60)
    store.commit_pages(C, [PageOutcome(lease, "retry", 503, "HTTP 503", retry_in=20)])
    assert store.lease(C, owner, 1, 60) == []  # not due yet
    assert store.due(C).open and store.due(C).wait == pytest.approx(20)
    clock.advance(19)
    assert store.lease(C, owner, 1, 60) == [] and store.due(C).wait == pytest.approx(1)
    clock.advance(1)
    assert store.due(C).wait == 0
    [lease] = store.lease(C, owner, 1, 60)
    assert lease.attempts == 1
    store.commit_pages(C, [PageOutcome(lease, "failed", 503, "HTTP 503 (gave up)")])
    [dead] = store.failed(C)
    assert (dead.url, dead.attempts, dead.http_status) == ("http://a/1", 2, 503)
    assert not store.due(C).open
    assert store.stats(C).retries == 1
    assert store.retry_failed(C) == 1
    assert store.failed(C) == [] and store.stats(C).pending == 1


def test_release_gives_leases_back_and_counts_requests(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    owner = store.register_worker()
    l1, l2 = store.lease(C, owner, 2, 60)
    store.release(C, [(l1, False), (l2, True)])
    stats = store.stats(C)
    assert stats.pending == 2
    assert stats.requests == 1  # l2 was fetched before it was given back
    assert stats.repeated == 1


def test_skipped_pages_are_done_without_a_request(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/private")])
    lease = lease_one(store, "http://a/private")
    store.commit_pages(C, [PageOutcome(lease, "skipped", error="disallowed by robots.txt")])
    stats = store.stats(C)
    assert stats.done == 1 and stats.requests == 0
    assert not store.due(C).open


def test_a_page_refused_before_its_request_fails_without_counting_one(store: Store) -> None:
    """The address guard refused its first hop (``sent=False``): dead letter, an attempt,
    but no request, in the crawl's figures and a run's; its worker committed it."""
    mark = store.high_water()
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    owner = store.register_worker(C)
    one, two = sorted(store.lease(C, owner, 2, 60), key=lambda x: x.url)
    refused = PageOutcome(one, "failed", error="a loopback address: refused", sent=False)
    store.commit_pages(C, [refused, PageOutcome(two, "failed", 403, "HTTP 403")])
    stats = store.stats(C)
    assert (stats.failed, stats.requests, stats.repeated) == (2, 1, 0)
    assert store.since(C, mark).requests == 1
    [worker] = store.workers(C)
    assert worker.pages == 2
    [dead] = [f for f in store.failed(C) if f.url == "http://a/1"]
    assert dead.attempts == 1
    # An errback made such a page done with a record: the run's figures find the record
    store.enqueue(C, [NewUrl("http://a/3")])
    [three] = store.lease(C, owner, 1, 60)
    row = RecordRow.build(id="id-e", source="s", key="e", url=None, data={"x": "1"})
    store.commit_pages(C, [PageOutcome(three, "done", records=[row], sent=False)])
    assert store.since(C, mark).events == {"record.created": 1}


def test_robots_cache(open_stores: Callable[[], Store], clock: ManualClock) -> None:
    a, b = open_stores(), open_stores()
    wa, wb = a.register_worker(), b.register_worker()  # live workers (liveness locks held)
    assert a.get_robots(C, "http://a") is None
    # one worker at a time fetches an origin's robots.txt
    assert a.claim_robots(C, "http://a", wa, 60)
    assert not b.claim_robots(C, "http://a", wb, 60)
    assert a.claim_robots(C, "http://a", wa, 60)  # the holder may renew its claim
    entry = b.get_robots(C, "http://a")
    assert entry is not None and entry.body is None and entry.claimed_for == pytest.approx(60)
    assert a.put_robots(C, "http://a", "User-agent: *\nDisallow: /x", owner=wa, age=5)
    clock.advance(10)
    entry = b.get_robots(C, "http://a")
    assert entry is not None and entry.body == "User-agent: *\nDisallow: /x"
    assert entry.age == pytest.approx(15) and entry.claimed_for is None
    # unreachable: failures counted from the first one, the last copy kept
    assert b.claim_robots(C, "http://a", wb, 60)
    assert b.robots_failed(C, "http://a", 30, owner=wb)
    clock.advance(30)
    assert b.claim_robots(C, "http://a", wb, 60)
    assert b.robots_failed(C, "http://a", 60, owner=wb)
    clock.advance(5)
    entry = a.get_robots(C, "http://a")
    assert entry is not None and entry.failures == 2 and entry.failing_for == pytest.approx(35)
    assert entry.body == "User-agent: *\nDisallow: /x" and entry.claimed_for is None
    assert entry.retry_in == pytest.approx(55)
    assert a.claim_robots(C, "http://a", wa, 60)
    assert a.put_robots(C, "http://a", "", owner=wa, age=0)
    entry = a.get_robots(C, "http://a")
    assert entry is not None and (entry.body, entry.failures, entry.failing_for) == ("", 0, None)


def test_robots_writes_are_fenced_by_the_claim(store: Store) -> None:
    assert store.claim_robots(C, "http://a", "paused", -1)  # lapsed while it was paused
    assert store.claim_robots(C, "http://a", "new", 60)
    # the paused worker comes back: its copy and its failure are both refused
    assert not store.put_robots(C, "http://a", "old copy", owner="paused", age=0)
    assert not store.robots_failed(C, "http://a", 60, owner="paused")
    store.release_robots(C, "http://a", "paused")  # not its claim: changes nothing
    entry = store.get_robots(C, "http://a")
    assert entry is not None and entry.body is None and entry.failures == 0
    assert entry.claimed_for is not None
    store.release_robots(C, "http://a", "new")
    assert store.claim_robots(C, "http://a", "third", 60)


def test_a_lapsed_claim_can_be_taken_over(store: Store) -> None:
    assert store.claim_robots(C, "http://a", "dead", -1)  # already lapsed
    assert store.claim_robots(C, "http://a", "alive", 60)


def test_higher_priority_is_leased_first_then_in_order_found(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/item1"), NewUrl("http://a/item2")])
    store.enqueue(C, [NewUrl("http://a/next", priority=1), NewUrl("http://a/item3")])
    owner = store.register_worker()
    assert [x.url for x in store.lease(C, owner, 2, 60)] == ["http://a/next", "http://a/item1"]
    assert [x.url for x in store.lease(C, owner, 5, 60)] == ["http://a/item2", "http://a/item3"]


def test_commit_and_lease_commits_a_group_and_leases_its_successors(store: Store) -> None:
    store.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(3)])
    owner = store.register_worker()
    first = store.lease(C, owner, 2, 60)
    pages = [
        PageOutcome(x, "done", 200, records=[rec(x.url, "1")], links=[NewUrl(x.url + "/n", 1)])
        for x in first
    ]
    errors, leases = store.commit_and_lease(C, pages, owner=owner, limit=2, lease_seconds=60)
    assert errors == [None, None]
    assert len(leases) == 2 and all(x.grant_id > max(y.grant_id for y in first) for x in leases)
    assert {x.url for x in leases} <= {"http://a/2", "http://a/0/n", "http://a/1/n"}
    stats = store.stats(C)
    assert (stats.done, stats.leased, stats.pending, stats.records) == (2, 2, 1, 2)
    # and a group holding a stale page is redone page by page, the others committed
    errors, more = store.commit_and_lease(
        C, [PageOutcome(first[0], "done", 200), PageOutcome(leases[0], "done", 200)],
        owner=owner, limit=2, lease_seconds=60,
    )  # fmt: skip
    assert errors == [STALE, None] and len(more) == 1  # the one URL still pending
    assert store.stats(C).done == 3


def test_commit_and_lease_refills_the_freed_slots_in_one_transaction(
    backend: Backend, store: Store
) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/bad")])
    owner = store.register_worker()
    l1, bad = store.lease(C, owner, 2, 60)
    backend.fail_done_mark("http://a/bad")
    outcomes = [
        PageOutcome(l1, "done", 200, links=[NewUrl(f"http://a/1/{i}", 1) for i in range(5)]),
        PageOutcome(bad, "done", 200),
    ]
    errors, leases = store.commit_and_lease(C, outcomes, owner=owner, limit=2, lease_seconds=60)
    assert errors[0] is None and errors[1] is not None
    # two slots offered, one kept by the page that failed to commit: one new lease,
    # taken from the links committed in the same transaction
    assert [x.url for x in leases] == ["http://a/1/0"]
    assert store.stats(C).leased == 2


# -- fencing (DESIGN rule 4): a lease that lapsed and was granted again writes nothing ----


def regranted(
    open_stores: Callable[[], Store], url: str = "http://a/1"
) -> tuple[Store, Lease, Store, Lease]:
    """Worker A's lease on ``url`` lapsed (it was paused) and B holds the URL now."""
    a, b = open_stores(), open_stores()
    a.enqueue(C, [NewUrl(url)])
    [old] = a.lease(C, a.register_worker(), 1, -1)  # lapsed at once: no sleeping
    [new] = b.lease(C, b.register_worker(), 1, 60)
    assert new.url == old.url and new.grant_id > old.grant_id
    return a, old, b, new


STALE_PAGES = {
    "done": lambda x: PageOutcome(
        x, "done", 200, records=[rec("k", "old")], links=[NewUrl("http://a/2", 1)]
    ),
    "skipped": lambda x: PageOutcome(x, "skipped", error="disallowed"),
    "retry": lambda x: PageOutcome(x, "retry", 503, "HTTP 503", retry_in=0),
    "deferred": lambda x: PageOutcome(x, "deferred", error="robots", retry_in=0),
    "failed": lambda x: PageOutcome(x, "failed", 500, "HTTP 500"),
}


@pytest.mark.parametrize("kind", sorted(STALE_PAGES))
def test_a_stale_commit_is_refused_whole(open_stores: Callable[[], Store], kind: str) -> None:
    a, old, b, new = regranted(open_stores)
    assert a.commit_pages(C, [STALE_PAGES[kind](old)]) == [STALE]
    stats = b.stats(C)
    assert (stats.leased, stats.pending, stats.done, stats.failed) == (1, 0, 0, 0)
    assert stats.records == 0 and stats.stale == 1
    assert b.failed(C) == []
    # the new owner's lease is untouched: it commits, and its content is what is stored
    page = PageOutcome(new, "done", 200, records=[rec("k", "new")])
    assert b.commit_pages(C, [page]) == [None]
    assert [r.data for r in b.iter_records(C)] == [{"price": "new"}]
    # once the URL is done, the old owner's commit is refused still
    assert a.commit_pages(C, [STALE_PAGES[kind](old)]) == [STALE]
    [record] = b.iter_records(C)
    assert record.version == 1 and b.stats(C).done == 1 and b.stats(C).stale == 1  # per grant


def test_a_stale_release_and_renew_are_refused(open_stores: Callable[[], Store]) -> None:
    a, old, b, new = regranted(open_stores)
    assert a.renew(C, [old], 60) == [old]  # not ours any more
    a.release(C, [(old, True)])
    stats = b.stats(C)
    assert stats.leased == 1 and stats.pending == 0  # B still holds it
    assert b.renew(C, [new], 60) == []
    assert b.commit_pages(C, [PageOutcome(new, "done", 200)]) == [None]


def test_a_stale_page_in_a_group_leaves_the_others_whole(open_stores: Callable[[], Store]) -> None:
    a, old, _b, _new = regranted(open_stores)
    a.enqueue(C, [NewUrl("http://a/fresh")])
    owner = a.register_worker()
    [fresh] = a.lease(C, owner, 1, 60)
    pages = [STALE_PAGES["done"](old), PageOutcome(fresh, "done", 200, records=[rec("f", "1")])]
    errors, leases = a.commit_and_lease(C, pages, owner=owner, limit=2, lease_seconds=60)
    assert errors == [STALE, None]
    assert [r.key for r in a.iter_records(C)] == ["f"]
    assert leases == []  # nothing else pending: the stale page's link was not written


@pytest.mark.parametrize("with_stale", [False, True], ids=["whole", "page_by_page"])
def test_every_page_of_a_group_has_its_grants_outcome(
    open_stores: Callable[[], Store], with_stale: bool
) -> None:
    """Each way a page ends is its grant's outcome, in a group committed whole (the fenced
    updates set the outcomes: PostgreSQL in the same statement) and in one redone page by
    page (a stale page in it)."""
    a, old, _b, _new = regranted(open_stores)
    kinds = sorted(STALE_PAGES)
    a.enqueue(C, [NewUrl(f"http://b/{kind}") for kind in kinds])
    owner = a.register_worker()
    leases = sorted(a.lease(C, owner, len(kinds), 60), key=lambda x: x.url)
    pages = [STALE_PAGES[kind](x) for kind, x in zip(kinds, leases, strict=True)]
    if with_stale:
        pages.append(STALE_PAGES["done"](old))
    errors, _ = a.commit_and_lease(C, pages, owner=owner, limit=0, lease_seconds=60)
    assert errors == [None] * len(kinds) + [STALE] * with_stale
    expected = dict.fromkeys(kinds, 1) | ({"stale": 1} if with_stale else {})
    outcomes = dict(a.stats(C).outcomes)
    # (the other worker's grant on the regranted URL is current: no outcome yet)
    assert outcomes.pop("in flight or lost") == 2 - with_stale
    assert outcomes == expected


# -- attempts (DESIGN rule 5): every path that may have made a request counts one ---------


def test_every_way_a_lease_ends_counts_an_attempt_if_it_may_have_fetched(
    open_stores: Callable[[], Store],
) -> None:
    store = open_stores()
    store.enqueue(C, [NewUrl("http://a/1")])
    owner = store.register_worker()

    def attempts_after(action: Callable[[Lease], None]) -> int:
        [lease] = store.lease(C, owner, 1, 60)
        action(lease)
        [again] = store.lease(C, owner, 1, -1)  # lapses at once
        store.release(C, [(again, False)])  # never counted: given back unfetched
        return again.attempts

    assert attempts_after(lambda x: store.release(C, [(x, False)])) == 0
    assert attempts_after(lambda x: store.release(C, [(x, True)])) == 1
    deferred = PageOutcome  # robots.txt unreachable: not fetched, not counted
    assert attempts_after(lambda x: store.commit_pages(C, [deferred(x, "deferred")])) == 1
    assert attempts_after(lambda x: store.commit_pages(C, [PageOutcome(x, "retry")])) == 2
    # a lease that lapses (its worker paused or died) counts: it may have fetched
    [lapsed] = store.lease(C, owner, 1, -1)
    [after] = store.lease(C, owner, 1, 60)
    assert after.attempts == lapsed.attempts + 1 == 3
    stats = store.stats(C)
    assert stats.outcomes.get("deferred") == 1


def test_odd_text_never_breaks_a_group_commit(store: Store) -> None:
    urls = ["http://a/1", "http://a/bad", "http://a/3"]
    store.enqueue(C, [NewUrl(u) for u in urls])
    owner = store.register_worker()
    l1, bad, l3 = store.lease(C, owner, 3, 60)
    # a lone surrogate in an error is escaped; a row the database cannot take (built by
    # hand, bypassing RecordRow.build) fails its own page only, naming the URL
    broken = RecordRow("id-x", "s", "x", None, '{"v":"\udc80"}', "h")
    errors = store.commit_pages(
        C,
        [
            PageOutcome(l1, "failed", 500, "boom \udc80"),
            PageOutcome(bad, "done", 200, records=[broken]),
            PageOutcome(l3, "done", 200, records=[rec("k3", "3")]),
        ],
    )
    assert errors[0] is None and errors[2] is None
    assert errors[1] is not None and errors[1].startswith("http://a/bad: cannot be stored")
    [dead] = store.failed(C)
    assert dead.error == "boom \\udc80"
    assert [r.key for r in store.iter_records(C)] == ["k3"]


ODD_KEYS = ["s\ud800", "s\\ud800", "a\x00b", "a\\x00b", "k\udc80", "plain",
            "p\ud83d\ude00", "p\U0001f600", "p\\ud83d\\ude00"]  # fmt: skip
# (the last three: a split surrogate pair, the character it would make, their escapes)


def test_keys_and_data_that_text_columns_cannot_hold_read_back_exactly(store: Store) -> None:
    # NUL (PostgreSQL's text cannot hold it) and lone surrogates (UTF-8 cannot): each key
    # is its own record, and reads back as it was yielded, with its own data.
    store.enqueue(C, [NewUrl("http://a/1")])
    [lease] = store.lease(C, store.register_worker(), 1, 60)
    rows = [
        RecordRow.build(id=record_id("s", k), source="s", key=k, url="http://a/1",
                        data={"key": k, "t": f"{k}\x00\udc80", k: [k]})
        for k in ODD_KEYS
    ]  # fmt: skip
    assert store.commit_pages(C, [PageOutcome(lease, "done", 200, records=rows)]) == [None]
    stored = {r.key: r for r in store.iter_records(C)}
    assert sorted(stored) == sorted(ODD_KEYS)
    for k in ODD_KEYS:
        assert stored[k].data == {"key": k, "t": f"{k}\x00\udc80", k: [k]}
        assert list(stored[k].data) == ["key", "t", k]  # the fields in the order given
        assert stored[k].id == record_id("s", k)


def test_the_same_fields_in_another_order_are_no_new_version(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    owner = store.register_worker()
    one, two = store.lease(C, owner, 2, 60)
    first = RecordRow.build(id="i", source="s", key="k", url=None, data={"b": 1, "a": 2})
    again = RecordRow.build(id="i", source="s", key="k", url=None, data={"a": 2, "b": 1})
    store.commit_pages(C, [PageOutcome(one, "done", 200, records=[first])])
    store.commit_pages(C, [PageOutcome(two, "done", 200, records=[again])])
    [stored] = store.iter_records(C)
    assert stored.version == 1 and stored.data == {"a": 2, "b": 1}


def test_records_are_read_a_page_at_a_time_each_once(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    [lease] = store.lease(C, store.register_worker(), 1, 60)
    keys = sorted(f"k{i}" for i in range(25))
    rows = [RecordRow.build(id=record_id("s", k), source="s", key=k, url=None, data=k)
            for k in keys]  # fmt: skip
    store.commit_pages(C, [PageOutcome(lease, "done", 200, records=rows)])
    store.read_page = 4  # type: ignore[attr-defined]
    assert sorted(r.key for r in store.iter_records(C)) == keys
    assert sorted(r.key for r in store.iter_records()) == keys


def test_a_deferred_page_holds_back_its_origins_pending_urls(
    store: Store, clock: ManualClock
) -> None:
    urls = ["http://a:81/1", "http://a:81/2", "http://a:81/x/3", "http://a:8/4", "http://b/5"]
    store.enqueue(C, [NewUrl(u) for u in urls])
    owner = store.register_worker()
    [first] = store.lease(C, owner, 1, 60)
    store.commit_pages(C, [PageOutcome(first, "deferred", error="robots", retry_in=30)])
    # the other pages of http://a:81 wait too; other origins (a:8 is one) do not
    later = store.lease(C, owner, 10, 60)
    assert sorted(x.url for x in later) == ["http://a:8/4", "http://b/5"]
    store.commit_pages(C, [PageOutcome(x, "done", 200) for x in later])
    assert store.due(C).wait == pytest.approx(30)
    clock.advance(30)
    assert len(store.lease(C, owner, 10, 60)) == 3


def test_a_dead_workers_robots_claim_is_taken_over_at_once(backend: Backend, store: Store) -> None:
    me = store.register_worker()
    with worker_process(backend.url, "out = s.claim_robots('c', 'http://a', o, 3600)") as got:
        assert got == "True"
        assert not store.claim_robots(C, "http://a", me, 60)  # alive
    # its claim was for an hour; its liveness lock died with it (PostgreSQL frees a killed
    # session's lock once the server has seen its socket close: a moment later on a busy
    # machine), so the claim is taken over long before the hour is up
    wait_for(lambda: store.claim_robots(C, "http://a", me, 60), timeout=60)


# -- a commit whose answer was lost (a dropped connection) is run again ------------------


def test_a_commit_run_twice_changes_nothing_the_second_time(store: Store) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    [lease] = store.lease(C, store.register_worker(), 1, 60)
    page = PageOutcome(lease, "done", 200, records=[rec("k", "1")], links=[NewUrl("http://a/2")])
    assert store.commit_pages(C, [page]) == [None]
    before = store.stats(C)
    assert store.commit_pages(C, [page]) == [STALE]  # its own page, already done
    after = store.stats(C)
    assert after == before and after.outcomes == {"done": 1}  # the grant stays done
    [record] = store.iter_records(C)
    assert record.version == 1


# -- workers -----------------------------------------------------------------------------


def test_workers_are_listed_with_liveness_leases_and_pages(backend: Backend, store: Store) -> None:
    store.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(6)])
    me = store.register_worker(C)
    mine = store.lease(C, me, 2, 60)
    store.commit_pages(C, [PageOutcome(mine[0], "done", 200)])
    with worker_process(backend.url, "out = len(s.lease('c', o, 3, 3600))") as leased:
        assert leased == "3"
        found = {w.owner: w for w in store.workers(C)}
        assert len(found) == 2 and all(w.alive for w in found.values())
        assert (found[me].leases, found[me].pages, found[me].crawl) == (1, 1, C)
        [other] = [w for w in found.values() if w.owner != me]
        assert other.leases == 3 and other.pages == 0 and other.pid > 0 and other.host

    # dead, still holding leases: listed as dead; once its leases are back, forgotten.
    # (PostgreSQL frees a killed session's locks once the server has seen its socket
    # close: a moment later on a busy machine.)
    def seen_dead() -> bool:
        return not any(w.alive for w in store.workers(C) if w.owner != me)

    wait_for(seen_dead, timeout=30)
    [dead] = [w for w in store.workers(C) if w.owner != me]
    assert not dead.alive and dead.leases == 3
    assert store.reclaim_dead_workers(C) == 3
    assert [w.owner for w in store.workers(C)] == [me]
    store.unregister_worker()  # (a clean stop gives its leases back first)
    assert [(w.alive, w.leases) for w in store.workers(C)] == [(False, 1)]
    store.release(C, [(mine[1], False)])
    assert store.workers(C) == []


# -- politeness across workers -------------------------------------------------------------


def test_per_host_leases_hold_for_all_workers_together(open_stores: Callable[[], Store]) -> None:
    a, b = open_stores(), open_stores()
    a.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(5)] + [NewUrl("http://b/1")])
    polite = Politeness(per_host=2)
    first = a.lease(C, a.register_worker(), 10, 60, politeness=polite)
    assert sorted(x.url for x in first) == ["http://a/0", "http://a/1", "http://b/1"]
    assert b.lease(C, b.register_worker(), 10, 60, politeness=polite) == []  # a is full
    a.commit_pages(C, [PageOutcome(first[0], "done", 200)])
    [next_one] = b.lease(C, b.register_worker(), 10, 60, politeness=polite)
    assert next_one.url == "http://a/2"
    # without politeness a claim takes whatever is due
    assert len(b.lease(C, b.register_worker(), 10, 60)) == 2


def test_a_delay_spaces_an_origins_grants_for_all_workers(
    open_stores: Callable[[], Store], clock: ManualClock
) -> None:
    a, b = open_stores(), open_stores()
    a.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(3)] + [NewUrl("http://b/1")])
    polite = Politeness(delay=2.0)
    got = a.lease(C, a.register_worker(), 10, 60, politeness=polite)
    assert sorted(x.url for x in got) == ["http://a/0", "http://b/1"]  # one per origin
    assert b.lease(C, b.register_worker(), 10, 60, politeness=polite) == []
    assert b.due(C).wait == pytest.approx(2.0)  # due, but its origin waits
    clock.advance(2.0)
    assert [x.url for x in b.lease(C, b.register_worker(), 10, 60, politeness=polite)] == [
        "http://a/1"
    ]


def test_a_robots_crawl_delay_spaces_grants_without_a_politeness_setting(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(3)] + [NewUrl("http://b/1")])
    store.set_host_delay(C, "http://a", 5.0)
    owner = store.register_worker()
    default = Politeness()  # what the engine passes: crawl-delays still hold
    got = store.lease(C, owner, 10, 60, politeness=default)
    assert sorted(x.url for x in got) == ["http://a/0", "http://b/1"]
    clock.advance(4.9)
    assert store.lease(C, owner, 10, 60, politeness=default) == []
    clock.advance(0.2)
    assert [x.url for x in store.lease(C, owner, 10, 60, politeness=default)] == ["http://a/1"]


def test_concurrent_claims_never_grant_a_url_twice(open_stores: Callable[[], Store]) -> None:
    stores = [open_stores() for _ in range(4)]
    stores[0].enqueue(C, [NewUrl(f"http://a/{i}") for i in range(400)])
    granted: list[list[str]] = [[] for _ in stores]

    def claim(i: int) -> None:
        store = stores[i]
        owner = store.register_worker()
        while leases := store.lease(C, owner, 7, 60):
            granted[i] += [x.url for x in leases]
            store.commit_pages(C, [PageOutcome(x, "done", 200) for x in leases])

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    every = [url for urls in granted for url in urls]
    assert len(every) == len(set(every)) == 400
    assert stores[0].stats(C).done == 400 and stores[0].stats(C).lease_grants == 400
