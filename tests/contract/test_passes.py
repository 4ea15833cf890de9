"""The Store contract for passes of a continuous or scheduled crawl: each page's next
visit, passes begun as they fall due (one at a time), and what each pass did."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from crashsafe.store import NewUrl, PageOutcome, RecordRow, Store
from tests.clock import ManualClock

C = "c"
HOUR = 3600.0


def rec(key: str, price: str) -> RecordRow:
    return RecordRow.build(id=f"id-{key}", source="s", key=key, url=None, data={"price": price})


def crawl_all(store: Store, pages: dict[str, tuple[float, list[RecordRow], dict]]) -> list[str]:
    """Lease every due URL and commit it done with what ``pages`` gives it (revisit_in,
    records, other PageOutcome fields); return the URLs fetched."""
    owner = store.register_worker()
    leased = store.lease(C, owner, 100, 60)
    outcomes = []
    for lease in leased:
        revisit_in, records, extra = pages[lease.url]
        outcomes.append(PageOutcome(lease, "done", 200, records=records,
                                    revisit_in=revisit_in, **extra))  # fmt: skip
    assert store.commit_pages(C, outcomes) == [None] * len(outcomes)
    return sorted(lease.url for lease in leased)


def test_pages_come_back_as_they_fall_due(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl("http://a/often"), NewUrl("http://a/rarely")])
    pages = {"http://a/often": (1 * HOUR, [rec("o", "1")], {}),
             "http://a/rarely": (24 * HOUR, [rec("r", "1")], {"body_bytes": 500})}  # fmt: skip
    assert crawl_all(store, pages) == ["http://a/often", "http://a/rarely"]
    turn = store.begin_pass(C)
    assert turn.started is None and turn.wait == 1 * HOUR  # nothing due before an hour
    clock.advance(1 * HOUR)
    turn = store.begin_pass(C)
    assert turn.started is not None and (turn.started.number, turn.started.requeued) == (2, 1)
    assert store.begin_pass(C).open  # pass 2 runs: no other begins
    pages["http://a/often"] = (1 * HOUR, [rec("o", "2")], {"revisit": None, "body_bytes": 700})
    assert crawl_all(store, pages) == ["http://a/often"]
    assert store.pass_figures(C)[0].number == 1  # pass 2's noted once it is finished:
    assert store.finish_pass(C) == 0
    turn = store.begin_pass(C)  # the next due an hour on
    assert turn.started is None and turn.wait == 1 * HOUR
    [two, one] = store.pass_figures(C)
    assert (one.number, one.fetched, one.created, one.changed, one.gone) == (1, 2, 2, 0, 0)
    assert one.body_bytes == 500
    assert (two.number, two.fetched, two.parsed, two.created, two.changed) == (2, 1, 1, 0, 1)
    assert two.body_bytes == 700
    clock.advance(24 * HOUR)  # both due now
    turn = store.begin_pass(C)
    assert turn.started is not None and turn.started.requeued == 2
    pages["http://a/often"] = (HOUR, [], {"revisit": None})  # its record left the page
    pages["http://a/rarely"] = (HOUR, [rec("r", "1")], {"revisit": "not-modified"})
    assert crawl_all(store, pages) == ["http://a/often", "http://a/rarely"]
    clock.advance(1)  # (a pass takes time: what it marks gone is stamped after its start)
    store.finish_pass(C)
    three = store.pass_figures(C)[0]
    assert (three.number, three.fetched, three.not_modified, three.gone) == (3, 2, 1, 1)


def test_every_begins_a_pass_of_every_page_on_time_and_says_when_late(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1"), NewUrl("http://a/2")])
    pages = {u: (30 * 24 * HOUR, [], {}) for u in ("http://a/1", "http://a/2")}
    clock.advance(2 * HOUR)  # pass 1 takes two hours
    crawl_all(store, pages)
    turn = store.begin_pass(C, every=6 * HOUR)
    assert turn.started is None and turn.wait == 4 * HOUR  # six hours after pass 1 began
    clock.advance(4 * HOUR)
    turn = store.begin_pass(C, every=6 * HOUR)
    assert turn.started is not None and turn.started.requeued == 2 and turn.late == 0
    clock.advance(7 * HOUR)  # pass 2 overruns by an hour
    crawl_all(store, pages)
    turn = store.begin_pass(C, every=6 * HOUR)
    assert turn.started is not None and turn.started.number == 3 and turn.late == 1 * HOUR
    assert turn.overran == 1 * HOUR
    clock.advance(7 * HOUR)  # pass 3 overruns by an hour, then nobody runs for two
    crawl_all(store, pages)
    clock.advance(2 * HOUR)
    turn = store.begin_pass(C, every=6 * HOUR)
    assert (turn.late, turn.overran) == (3 * HOUR, 1 * HOUR)  # (it was all put down to one)


def test_a_sitemap_lastmod_newer_than_the_fetch_makes_a_page_due(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/map"), NewUrl("http://a/p")])
    pages = {"http://a/map": (HOUR, [], {}), "http://a/p": (100 * HOUR, [], {})}
    crawl_all(store, pages)
    clock.advance(HOUR)
    assert store.begin_pass(C).started.requeued == 1  # the sitemap
    fetched_at = clock.now - HOUR
    pages["http://a/map"] = (HOUR, [], {"links": [
        NewUrl("http://a/p", changed_at=fetched_at - 10),  # older: nothing to do
    ]})  # fmt: skip
    crawl_all(store, pages)
    assert store.begin_pass(C).wait == HOUR  # only the sitemap, in an hour
    clock.advance(HOUR)
    store.begin_pass(C)
    pages["http://a/map"] = (HOUR, [], {"links": [NewUrl("http://a/p", changed_at=clock.now)]})
    crawl_all(store, pages)
    clock.advance(1)
    turn = store.begin_pass(C)
    assert turn.started is not None and turn.started.requeued == 1
    assert crawl_all(store, pages) == ["http://a/p"]


def test_two_workers_never_begin_two_passes(
    open_stores: Callable[[], Store], clock: ManualClock
) -> None:
    first = open_stores()
    first.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(20)])
    pages = {f"http://a/{i}": (HOUR, [], {}) for i in range(20)}
    crawl_all(first, pages)
    clock.advance(HOUR)
    stores = [open_stores() for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    turns = []

    def race(s: Store) -> None:
        barrier.wait()
        turns.append(s.begin_pass(C))

    threads = [threading.Thread(target=race, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    begun = [t for t in turns if t.started is not None]
    assert len(begun) == 1 and begun[0].started.requeued == 20
    assert all(t.open for t in turns if t.started is None)  # the others join it


P, Q = "http://a/p", "http://a/q"


def visit(
    store: Store,
    clock: ManualClock,
    groups: list[list[tuple[str, list[RecordRow], dict]]],
    after: dict[str, float],
) -> None:
    """Begin the pass of the pages due (none if this is the first crawl), commit them in
    ``groups`` of (url, records, other PageOutcome fields), and end the pass; each page
    comes back ``after[url]`` hours on."""
    store.begin_pass(C)
    owner = store.register_worker()
    leased = {x.url: x for x in store.lease(C, owner, 100, 60)}
    assert sorted(leased) == sorted(url for group in groups for url, _, _ in group)
    for group in groups:
        outcomes = [PageOutcome(leased[url], "done", extra.pop("status", 200), records=records,
                                revisit_in=after[url] * HOUR, **extra)
                    for url, records, extra in group]  # fmt: skip
        assert store.commit_pages(C, outcomes) == [None] * len(outcomes)
    store.finish_pass(C)


def record_x(store: Store) -> tuple[int, float | None]:
    [x] = store.iter_records(C, since=0.0)  # (a feed: gone records too)
    return x.version, x.gone_at


@pytest.mark.parametrize("one_group", [True, False], ids=["one group", "two groups"])
@pytest.mark.parametrize("first", [P, Q], ids=["p drops it first", "q drops it first"])
def test_a_record_two_pages_list_is_gone_only_when_neither_does(
    store: Store, clock: ManualClock, one_group: bool, first: str
) -> None:
    """x is on /p and /q. A pass that fetches only one of them, which dropped it, leaves
    it (the other lists it still: a continuous crawl's pass fetches the pages due, not
    all); the pass that fetches the other, which dropped it too, marks it gone."""
    second = Q if first == P else P
    store.enqueue(C, [NewUrl(P), NewUrl(Q)])
    x = rec("x", "1")
    both = [(P, [x], {}), (Q, [x], {})]
    after = {first: 1, second: 2}
    visit(store, clock, [both] if one_group else [[both[0]], [both[1]]], after)
    clock.advance(HOUR)
    visit(store, clock, [[(first, [], {})]], {first: 100})
    assert record_x(store) == (1, None)  # /the other still lists it
    clock.advance(HOUR)
    visit(store, clock, [[(second, [], {})]], {second: 100})
    version, gone_at = record_x(store)
    assert version == 2 and gone_at is not None


def test_a_lease_says_whether_its_page_lists_records_and_what_its_fetch_showed(
    store: Store, clock: ManualClock
) -> None:
    """Only a page whose last parse yielded records can have dropped some: the commit
    looks for them then. A page done without records, or never done, lists none. The
    claim also hands out what each page's last fetch showed (its validators), with which
    a recrawl asks for changes only."""
    r = "http://a/r"
    store.enqueue(C, [NewUrl(P), NewUrl(r)])
    owner = store.register_worker()
    first = store.lease(C, owner, 10, 60)
    assert [(x.listed, x.seen) for x in first] == [(False, None), (False, None)]
    store.commit_pages(C, [PageOutcome(x, "done", 200, revisit_in=HOUR,
                                       records=[rec("x", "1")] if x.url == P else [],
                                       validators='{"etag":"v1"}' if x.url == P else None)
                           for x in first])  # fmt: skip
    clock.advance(HOUR)
    assert store.begin_pass(C).started.requeued == 2
    store.enqueue(C, [NewUrl(Q)])  # a link found in the pass
    leases = {x.url: (x.listed, x.seen) for x in store.lease(C, owner, 10, 60)}
    assert leases == {P: (True, '{"etag":"v1"}'), r: (False, None), Q: (False, None)}


@pytest.mark.parametrize("how", ["retry", "retry the URL"])
def test_a_page_that_failed_and_was_retried_still_drops_what_it_no_longer_lists(
    store: Store, clock: ManualClock, how: str
) -> None:
    """x on /p. In pass 2 /p fails; `crashsafe retry` queues it again; it answers without
    x: x is gone when the pass ends (retry forgets the page's done mark, not its
    listing)."""
    store.enqueue(C, [NewUrl(P)])
    visit(store, clock, [[(P, [rec("x", "1")], {})]], {P: 1})
    clock.advance(HOUR)
    assert store.begin_pass(C).started is not None
    [lease] = store.lease(C, store.register_worker(), 10, 60)
    store.commit_pages(C, [PageOutcome(lease, "failed", 500, "HTTP 500")])
    assert store.retry_failed(C, urls=None if how == "retry" else [P]) == 1
    [lease] = store.lease(C, store.register_worker(), 10, 60)
    assert lease.listed
    store.commit_pages(C, [PageOutcome(lease, "done", 200, revisit_in=HOUR)])
    store.finish_pass(C)
    version, gone_at = record_x(store)
    assert version == 2 and gone_at is not None


@pytest.mark.parametrize("status", [302, None], ids=["302", "robots"])
def test_a_page_whose_fetch_says_nothing_keeps_listing_its_records(
    store: Store, clock: ManualClock, status: int | None
) -> None:
    """x on /p. In pass 2 /p answers a temporary redirect (or robots.txt now disallows
    it): its last parse still lists x, whatever /q does. /q lists x in that pass, drops
    it in the next (/p not fetched): x stays; /p dropping it makes it gone."""
    store.enqueue(C, [NewUrl(P), NewUrl(Q)])
    x = rec("x", "1")
    visit(store, clock, [[(P, [x], {}), (Q, [], {})]], {P: 1, Q: 1})
    clock.advance(HOUR)
    visit(store, clock, [[(P, [], {"status": status})], [(Q, [x], {})]], {P: 2, Q: 1})
    clock.advance(HOUR)
    visit(store, clock, [[(Q, [], {})]], {Q: 100})
    assert record_x(store) == (1, None)
    clock.advance(HOUR)
    visit(store, clock, [[(P, [], {})]], {P: 100})
    version, gone_at = record_x(store)
    assert version == 2 and gone_at is not None


@pytest.mark.parametrize("status", [500, 403, None])
def test_a_page_an_errback_made_done_keeps_listing_its_records(
    store: Store, clock: ManualClock, status: int | None
) -> None:
    """x on /p. In pass 2 /p fails (a 500, a 403 not handled, no answer) and its errback
    makes it done, yielding y: x stays listed, y is listed too (an errback's 500 emptied
    /p's listing and made x gone: found by a review). /p parsed again without x: gone."""
    store.enqueue(C, [NewUrl(P)])
    x, y = rec("x", "1"), rec("y", "1")
    visit(store, clock, [[(P, [x], {})]], {P: 1})
    clock.advance(HOUR)
    visit(store, clock, [[(P, [y], {"status": status, "error": "HTTP 500"})]], {P: 1})
    gone = {r.key: r.gone_at for r in store.iter_records(C, since=0.0)}
    assert gone == {"x": None, "y": None}
    clock.advance(HOUR)
    visit(store, clock, [[(P, [y], {})]], {P: 100})  # parsed: drops x, lists y
    gone = {r.key: r.gone_at for r in store.iter_records(C, since=0.0)}
    assert gone["x"] is not None and gone["y"] is None


def test_a_pass_begun_as_the_last_one_ends_does_not_count_its_gone_records(
    store: Store, clock: ManualClock
) -> None:
    """x goes in pass 2, which the begin of pass 3 ends (``--every`` shorter than a
    pass): pass 3's figures counted x as gone too (found by a review)."""
    store.enqueue(C, [NewUrl(P), NewUrl(Q)])
    visit(store, clock, [[(P, [rec("x", "1")], {}), (Q, [], {})]], {P: 1, Q: 1})
    for _ in range(2):  # passes 2 and 3, each ended by the next begin_pass
        clock.advance(HOUR)
        assert store.begin_pass(C).started is not None
        owner = store.register_worker()
        leased = store.lease(C, owner, 100, 60)
        outcomes = [PageOutcome(x, "done", 200, records=[], revisit_in=HOUR) for x in leased]
        assert store.commit_pages(C, outcomes) == [None] * len(outcomes)
    store.finish_pass(C)
    gone = {f.number: f.gone for f in store.pass_figures(C)}
    assert gone == {1: 0, 2: 1, 3: 0}


@pytest.mark.parametrize("order", ["304 first", "304 last"])
def test_a_record_a_page_keeps_unchanged_is_not_gone_when_another_drops_it(
    store: Store, clock: ManualClock, order: str
) -> None:
    """x is on /p and /q; /q answers 304 (it still lists x) in the pass where /p drops
    it: x stays, as it is. When /q drops it later, it is gone."""
    store.enqueue(C, [NewUrl(P), NewUrl(Q)])
    x = rec("x", "1")
    visit(store, clock, [[(Q, [x], {}), (P, [x], {})]], {P: 1, Q: 1})  # /p's last
    clock.advance(HOUR)
    kept = (Q, [], {"revisit": "not-modified", "kept": ["id-x"]})
    dropped = (P, [], {})
    groups = [[kept], [dropped]] if order == "304 first" else [[dropped], [kept]]
    visit(store, clock, groups, {P: 100, Q: 1})
    assert record_x(store) == (1, None)
    clock.advance(HOUR)
    visit(store, clock, [[(Q, [], {})]], {Q: 100})
    version, gone_at = record_x(store)
    assert version == 2 and gone_at is not None


def test_a_record_that_moves_to_another_page_is_not_gone_and_goes_with_it(
    store: Store, clock: ManualClock
) -> None:
    """x moves from /p to /q within a pass (no new version); /p's page, now 404, then
    says nothing of it; /q dropping it makes it gone. Three pages list y: each that
    drops it, or answers 404, leaves it to the others until none lists it."""
    r = "http://a/r"
    store.enqueue(C, [NewUrl(P), NewUrl(Q), NewUrl(r)])
    x, y = rec("x", "1"), rec("y", "1")
    visit(store, clock, [[(P, [x, y], {}), (Q, [y], {}), (r, [y], {})]], {P: 1, Q: 1, r: 4})
    clock.advance(HOUR)
    visit(store, clock, [[(P, [], {})], [(Q, [x, y], {})]], {P: 1, Q: 2})
    [xr, yr] = store.iter_records(C, since=0.0)
    assert (xr.version, xr.gone_at, yr.version, yr.gone_at) == (1, None, 1, None)
    clock.advance(HOUR)
    visit(store, clock, [[(P, [], {"status": 404})]], {P: 100})
    [xr, yr] = store.iter_records(C, since=0.0)
    assert (xr.gone_at, yr.gone_at) == (None, None)
    clock.advance(HOUR)
    visit(store, clock, [[(Q, [], {})]], {Q: 100})
    [xr, yr] = store.iter_records(C, since=0.0)
    assert xr.version == 2 and xr.gone_at is not None
    assert (yr.version, yr.gone_at) == (1, None)  # /r lists it still
    clock.advance(HOUR)
    visit(store, clock, [[(r, [], {"status": 404})]], {r: 100})
    [_, yr] = store.iter_records(C, since=0.0)
    assert yr.version == 2 and yr.gone_at is not None


def test_failed_pages_get_another_chance_in_the_next_pass(store: Store, clock: ManualClock) -> None:
    store.enqueue(C, [NewUrl("http://a/ok"), NewUrl("http://a/down")])
    owner = store.register_worker()
    leased = {x.url: x for x in store.lease(C, owner, 10, 60)}
    outcomes = [PageOutcome(leased["http://a/ok"], "done", 200, revisit_in=HOUR),
                PageOutcome(leased["http://a/down"], "failed", error="refused",
                            revisit_in=2 * HOUR)]  # fmt: skip
    assert store.commit_pages(C, outcomes) == [None, None]
    clock.advance(HOUR)  # --continuous: the failed page comes back when it is due
    assert store.begin_pass(C).started.requeued == 1
    assert crawl_all(store, {"http://a/ok": (HOUR, [], {})}) == ["http://a/ok"]
    clock.advance(HOUR)
    assert store.begin_pass(C).started.requeued == 2  # both due now
    owner = store.register_worker()
    leased = {x.url: x for x in store.lease(C, owner, 10, 60)}
    assert leased["http://a/down"].attempts == 0  # a fresh start
    outcomes = [PageOutcome(leased["http://a/ok"], "done", 200, revisit_in=HOUR),
                PageOutcome(leased["http://a/down"], "failed", error="refused",
                            revisit_in=100 * HOUR)]  # fmt: skip
    store.commit_pages(C, outcomes)
    clock.advance(6 * HOUR)  # --every: every page, the failed one too, due or not
    assert store.begin_pass(C, every=6 * HOUR).started.requeued == 2


def test_a_run_that_takes_part_in_its_last_pass_begins_no_other(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/1")])
    pages = {"http://a/1": (HOUR, [], {})}
    crawl_all(store, pages)
    clock.advance(2 * HOUR)
    turn = store.begin_pass(C, last=1)  # pass 1 was the run's last: it ended, none begins
    assert turn.ended and turn.number == 1 and turn.started is None
    assert store.pass_figures(C)[0].number == 1  # noted
    assert store.begin_pass(C, last=2).started.number == 2
    assert store.begin_pass(C, last=2).open
    crawl_all(store, pages)
    clock.advance(2 * HOUR)
    assert store.begin_pass(C, last=2).ended


def test_a_page_gone_at_three_visits_in_a_row_is_retired_until_linked_again(
    store: Store, clock: ManualClock
) -> None:
    store.enqueue(C, [NewUrl("http://a/list")])  # a start URL (depth 0), and what it links
    store.enqueue(C, [NewUrl("http://a/gone", depth=1), NewUrl("http://a/flaky", depth=1)])
    answers = {"http://a/list": 200, "http://a/gone": 404, "http://a/flaky": 410}

    def one_pass(links: tuple[str, ...] = ("http://a/list",), failed: str = "") -> list[str]:
        owner = store.register_worker()
        leased = store.lease(C, owner, 100, 60)
        outs = [PageOutcome(x, "done", answers[x.url], revisit_in=HOUR,
                            links=[NewUrl(u, depth=1) for u in links
                                   if x.url == "http://a/list" and answers[x.url] == 200])
                if x.url != failed else PageOutcome(x, "failed", 500, "HTTP 500")
                for x in leased]  # fmt: skip
        assert store.commit_pages(C, outs) == [None] * len(outs)
        return sorted(x.url for x in leased)

    every = ["http://a/flaky", "http://a/gone", "http://a/list"]
    assert one_pass() == every  # gone once
    clock.advance(HOUR)
    assert store.begin_pass(C).started.requeued == 3
    assert one_pass() == every  # twice
    answers["http://a/flaky"] = 200  # back: its streak ends
    assert store.recrawl(C).requeued == 3
    assert one_pass() == every  # /gone three times in a row: retired
    assert store.retired(C) == 1 and store.effect_stats(C).retired == 1
    clock.advance(HOUR)  # neither --continuous, nor --every, nor recrawl queues it
    turn = store.begin_pass(C)
    assert turn.started.requeued == 2
    assert one_pass() == ["http://a/flaky", "http://a/list"]
    # and a crawl that keeps running waits for the pages that can be due, not for it
    assert store.begin_pass(C).wait == pytest.approx(HOUR)
    answers["http://a/flaky"] = 404
    for _ in range(2):
        assert store.begin_pass(C, every=0.0).started.requeued == 2
        assert one_pass() == ["http://a/flaky", "http://a/list"]
    assert store.retired(C) == 1 and store.recrawl(C).requeued == 2
    # /flaky: two 404s since it came back, not three
    assert one_pass(("http://a/gone",)) == ["http://a/flaky", "http://a/list"]
    # the list links /gone again (and /flaky's third 404 retires it): the next pass has it
    assert store.retired(C) == 1
    clock.advance(HOUR)
    assert store.begin_pass(C).started.requeued == 2
    assert one_pass() == ["http://a/gone", "http://a/list"]
    # a run given it as a start URL brings a retired page back; so does revive_retired
    store.enqueue(C, [NewUrl("http://a/flaky")])
    assert store.retired(C) == 0 and store.recrawl(C).requeued == 3
    answers.update({"http://a/gone": 200, "http://a/flaky": 200})
    assert one_pass() == every  # (every streak ends)
    answers.update({url: 404 for url in answers})  # an outage: the start URL never
    for _ in range(3):  # retires ...
        store.recrawl(C)
        assert one_pass() == every
    assert store.retired(C) == 2  # (... the pages it links do)
    assert store.revive_retired(C) == 2 and store.recrawl(C).requeued == 3
    # a failure between two 404s ends the streak
    answers["http://a/list"] = 200
    assert one_pass() == every  # /gone and /flaky: a 404 each
    assert store.begin_pass(C, every=0.0).started.requeued == 3
    assert one_pass(failed="http://a/gone") == every  # /gone fails: its streak ends
    assert store.begin_pass(C, every=0.0).started.requeued == 3
    assert one_pass() == every  # /flaky's third 404 retires it
    assert store.begin_pass(C, every=0.0).started.requeued == 2
    assert one_pass() == ["http://a/gone", "http://a/list"]
    assert store.retired(C) == 1  # /gone: two 404s since its failure, not four


def test_a_page_found_the_same_keeps_its_link_counts(store: Store, clock: ManualClock) -> None:
    """Not parsed (304, or the same body): its links are those counted when it was; a
    page parsed again counts afresh."""
    store.enqueue(C, [NewUrl("http://a/same"), NewUrl("http://a/parsed")])
    counts = {"links_skipped": 1, "links_cut": 2, "links_offsite": 3}
    pages = {u: (HOUR, [], dict(counts)) for u in ("http://a/same", "http://a/parsed")}
    crawl_all(store, pages)
    s = store.stats(C)
    assert (s.links_skipped, s.links_cut, s.links_offsite) == (2, 4, 6)
    clock.advance(HOUR)
    assert store.begin_pass(C).started is not None
    pages["http://a/same"] = (HOUR, [], {"revisit": "not-modified"})  # counts 0: not read
    pages["http://a/parsed"] = (HOUR, [], {"links_offsite": 1})
    crawl_all(store, pages)
    s = store.stats(C)
    assert (s.links_skipped, s.links_cut, s.links_offsite) == (1, 2, 4)
