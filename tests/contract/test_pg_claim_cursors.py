"""PostgreSQL's claim cursors (store/postgres_cursors.py): a worker's claims resume where
it stopped, so a long transaction holding back vacuum does not make every claim walk past
the URLs claimed before; and nothing behind a cursor is lost or waits for long."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from crashsafe.store import NewUrl, PageOutcome, RecordRow, Store, open_store
from crashsafe.store.postgres import _claim_after
from crashsafe.store.postgres_cursors import RESCAN_MAX, RESCAN_SECONDS, ClaimCursors
from crashsafe.store.queries import load_queries
from tests import pg
from tests.clock import ManualClock

C = "c"
Stores = tuple[Store, Store, ManualClock]


@pytest.fixture
def stores(pg_url: str) -> Iterator[Stores]:
    """Two workers' stores on one PostgreSQL crawl, sharing a clock the test moves."""
    clock = ManualClock()
    a, b = open_store(pg_url, clock=clock), open_store(pg_url, clock=clock)
    yield a, b, clock
    a.close()
    b.close()


def done(leases: list) -> list[PageOutcome]:  # type: ignore[type-arg]
    return [
        PageOutcome(x, "done", 200, records=[RecordRow.build(
            id=f"id-{x.frontier_id}", source="s", key=str(x.frontier_id), url=None, data={},
        )])
        for x in leases
    ]  # fmt: skip


def test_urls_behind_a_workers_cursor_are_claimed_once_it_looks_again(stores: Stores) -> None:
    a, b, clock = stores
    a.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(40)])
    owner_a, owner_b = a.register_worker(C), b.register_worker(C)
    first = a.lease(C, owner_a, 4, 600)  # /0-/3, a plain claim
    [given_back] = b.lease(C, owner_b, 1, 600)  # /4
    _, leases = a.commit_and_lease(C, done(first), owner=owner_a, limit=4, lease_seconds=600)
    assert [x.url for x in leases] == [f"http://a/{i}" for i in range(5, 9)]  # cursor
    b.release(C, [(given_back, False)])  # /4 is pending again, behind a's cursor
    b.enqueue(C, [NewUrl("http://a/urgent", priority=5)])  # a priority a never saw
    _, leases = a.commit_and_lease(C, done(leases), owner=owner_a, limit=4, lease_seconds=600)
    assert [x.url for x in leases] == [f"http://a/{i}" for i in range(9, 13)]
    clock.advance(RESCAN_SECONDS)  # a looks from the start again
    _, leases = a.commit_and_lease(C, done(leases), owner=owner_a, limit=4, lease_seconds=600)
    assert [x.url for x in leases] == [
        "http://a/urgent", "http://a/4", "http://a/13", "http://a/14",
    ]  # fmt: skip


def test_a_short_claim_from_the_cursors_is_topped_up_from_the_start(stores: Stores) -> None:
    a, b, _ = stores
    a.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(6)])
    owner_a, owner_b = a.register_worker(C), b.register_worker(C)
    [given_back] = b.lease(C, owner_b, 1, 600)  # /0
    first = a.lease(C, owner_a, 3, 600)  # /1-/3
    b.release(C, [(given_back, False)])
    _, leases = a.commit_and_lease(C, done(first), owner=owner_a, limit=4, lease_seconds=600)
    # /4 and /5 from the cursor, and the rest of the claim from the start: /0.
    assert sorted(x.url for x in leases) == ["http://a/0", "http://a/4", "http://a/5"]


def test_a_lapsed_lease_granted_by_a_plain_claim_does_not_move_the_cursor_past_others(
    stores: Stores,
) -> None:
    a, b, clock = stores
    b.enqueue(C, [NewUrl(f"http://a/{i:02}") for i in range(20)])
    owner_a, owner_b = a.register_worker(C), b.register_worker(C)
    held = b.lease(C, owner_b, 20, 1)
    b.release(C, [(x, False) for x in held if x.url != "http://a/19"])  # /19 lapses
    clock.advance(5)
    first = a.lease(C, owner_a, 4, 600)  # the lapsed /19 first, then /00-/02
    assert sorted(x.url for x in first) == [
        "http://a/00",
        "http://a/01",
        "http://a/02",
        "http://a/19",
    ]
    b.enqueue(C, [NewUrl(f"http://a/new{i}") for i in range(20)])
    _, leases = a.commit_and_lease(C, done(first), owner=owner_a, limit=4, lease_seconds=600)
    assert [x.url for x in leases] == [f"http://a/{i:02}" for i in range(3, 7)]


def test_a_pause_from_another_connection_stops_claims_from_the_cursors(stores: Stores) -> None:
    worker, console, _ = stores
    worker.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(40)])
    owner = worker.register_worker(C)
    leases = worker.lease(C, owner, 4, 600)
    _, leases = worker.commit_and_lease(C, done(leases), owner=owner, limit=4, lease_seconds=600)
    assert worker._cursors.usable(C)  # type: ignore[attr-defined]  # (claims from cursors)
    assert console.pause(C, actor="test")
    _, granted = worker.commit_and_lease(C, done(leases), owner=owner, limit=4, lease_seconds=600)
    assert granted == []
    console.resume(C, actor="test")
    _, granted = worker.commit_and_lease(C, [], owner=owner, limit=4, lease_seconds=600)
    assert [x.url for x in granted] == [f"http://a/{i}" for i in range(8, 12)]


def test_a_claim_from_the_cursors_reads_what_it_grants_while_vacuum_is_held_back(
    pg_url: str,
) -> None:
    # A transaction holds a snapshot: no index entry of a URL claimed since can be removed.
    store = open_store(pg_url)
    holder = pg.connect(pg_url)
    queries = load_queries("postgres")
    try:
        # A few pages of a higher priority (listings, say), found first and done first.
        store.enqueue(C, [NewUrl(f"http://a/list/{i}", priority=1) for i in range(10)])
        store.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(6000)])
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT txid_current()")
        owner = store.register_worker(C)
        leases = store.lease(C, owner, 16, 600)

        def claim_for(rounds: int) -> None:
            nonlocal leases
            for _ in range(rounds):
                _, leases = store.commit_and_lease(
                    C, done(leases), owner=owner, limit=16, lease_seconds=600
                )

        def scanned() -> tuple[int, int]:
            """Buffers the plain claim's and the cursors' walks of the frontier read."""
            cursors = store._cursors.usable(C)  # type: ignore[attr-defined]
            assert cursors is not None and cursors[0] == max(x.frontier_id for x in leases)
            # The listings' priority, done long ago: its cursor is far behind.
            after_sql, after_p = _claim_after(p, {1: 10, 0: cursors[0]})
            found = []
            for sql, q in ((queries["claim_due"], p), (after_sql, after_p)):
                with pg.connect(pg_url) as db:
                    db.execute("BEGIN")
                    plan = db.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", q)
                    [[explained]] = plan.fetchone()
                    db.execute("ROLLBACK")
                found.append(sum(
                    node["Shared Hit Blocks"] + node["Shared Read Blocks"]
                    for node in nodes(explained["Plan"])
                    if node.get("Relation Name") == "frontier"
                    and "ANY" not in node.get("Index Cond", "ANY")  # (not the update's)
                ))  # fmt: skip
            return found[0], found[1]

        p = {"crawl": C, "owner": owner, "now": None, "limit": 16, "lease_seconds": 600}
        claim_for(60)  # 960 URLs claimed and done
        plain_early, resumed_early = scanned()
        claim_for(240)  # 4 800
        plain_late, resumed_late = scanned()
        # The plain claim walks past every entry left behind since the snapshot; a claim
        # from the cursors reads about the same however many there are.
        assert plain_late > 3 * plain_early, (plain_early, plain_late)
        assert resumed_late <= resumed_early + 5, (resumed_early, resumed_late)
    finally:
        holder.close()
        store.close()


def nodes(plan: dict) -> list[dict]:  # type: ignore[type-arg]
    """Every node of an EXPLAIN (FORMAT JSON) plan."""
    found = [plan]
    for child in plan.get("Plans", []):
        found += nodes(child)
    return found


def plain_claim(cursors: ClaimCursors, took: float) -> None:
    """A plain claim that took ``took`` seconds granted URL 7 (priority 0), committed."""
    cursors.rescanned(C, took)
    cursors.granted(C, [(7, "u", 0, 0, None, 0)], plain=True)
    cursors.committed()


def test_a_slow_plain_claim_makes_the_next_one_wait_longer() -> None:
    # (while a long transaction holds back vacuum, a plain claim walks past every URL
    # leased since: the cursors' claims go on meanwhile)
    clock = ManualClock()
    cursors = ClaimCursors(clock)
    plain_claim(cursors, 0.01)
    clock.advance(RESCAN_SECONDS)
    assert cursors.usable(C) is None  # the plain claim is due
    plain_claim(cursors, 1.0)  # slow: the next one in 20 s
    clock.advance(RESCAN_SECONDS)
    assert cursors.usable(C) == {0: 6}
    clock.advance(20 - RESCAN_SECONDS)
    assert cursors.usable(C) is None
    plain_claim(cursors, 30.0)  # very slow: never more than RESCAN_MAX
    clock.advance(RESCAN_MAX - 1)
    assert cursors.usable(C) is not None
    clock.advance(1)
    assert cursors.usable(C) is None


def test_a_plain_claim_as_slow_as_the_cursors_claims_does_not_make_the_next_wait() -> None:
    # (a busy server slows every claim alike: then what lies behind the cursors must not
    # wait longer; a plain claim slower than they are walks dead entries they skip)
    clock = ManualClock()
    cursors = ClaimCursors(clock)
    for _ in range(5):
        cursors.claimed_from_cursors(0.5)
    plain_claim(cursors, 1.0)  # as slow as the claims from the cursors, about: a busy server
    clock.advance(RESCAN_SECONDS)
    assert cursors.usable(C) is None  # the next plain claim is due as usual
    for _ in range(20):
        cursors.claimed_from_cursors(0.01)  # the server is quick again
    plain_claim(cursors, 1.0)  # a hundred times slower than they are: the next one in 20 s
    clock.advance(RESCAN_SECONDS)
    assert cursors.usable(C) == {0: 6}
    clock.advance(20 - RESCAN_SECONDS)
    assert cursors.usable(C) is None


def test_a_store_times_its_claims_from_the_cursors(stores: Stores) -> None:
    # (what the test above compares a plain claim with)
    a, _, _ = stores
    a.enqueue(C, [NewUrl(f"http://a/{i}") for i in range(8)])
    owner = a.register_worker(C)
    first = a.lease(C, owner, 4, 600)  # a plain claim
    assert a._cursors._cursor_claim_took is None  # type: ignore[attr-defined]
    a.commit_and_lease(C, done(first), owner=owner, limit=4, lease_seconds=600)  # cursors
    assert a._cursors._cursor_claim_took is not None  # type: ignore[attr-defined]
