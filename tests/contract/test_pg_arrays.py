"""PostgreSQL array literals the store writes itself (store/postgres_arrays.py): every
value reads back as it was sent, whatever its characters; and the tables a page commit
writes are analyzed again as the store commits pages (store/postgres.py)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from crashsafe.store import NewUrl, PageOutcome, RecordRow, Store, open_store
from crashsafe.store.postgres_arrays import array_literal, columns
from tests import pg

ODD = [
    "", " ", "plain", 'a "quoted" word', "back\\slash", "\\", '"', "{braces}", "a,comma",
    "NULL", "null", "new\nline\ttab", "  spaces  ", "ünïcödé ✓ 𝄞", "'single'", "\\\"", "{}",
]  # fmt: skip


def read_back(url: str, sql_type: str, values: list) -> list:  # type: ignore[type-arg]
    with pg.connect(url) as db:
        literal = array_literal(values)
        assert isinstance(literal, str)
        [(back,)] = db.execute(f"SELECT %(v)s::{sql_type}[]", {"v": literal}).fetchall()
        return back  # type: ignore[no-any-return]


def test_text_of_any_characters_reads_back_unchanged(pg_url: str) -> None:
    assert read_back(pg_url, "text", [*ODD, None]) == [*ODD, None]


def test_numbers_and_flags_read_back_unchanged(pg_url: str) -> None:
    assert read_back(pg_url, "bigint", [0, -1, 2**62, None]) == [0, -1, 2**62, None]
    assert read_back(pg_url, "boolean", [True, False, None]) == [True, False, None]
    floats = read_back(pg_url, "float8", [1733310000.123456, -0.5, 1e300, math.inf, None])
    assert floats == [1733310000.123456, -0.5, 1e300, math.inf, None]
    [nan] = read_back(pg_url, "float8", [math.nan])
    assert math.isnan(nan)


def test_a_column_of_other_values_is_left_to_psycopg() -> None:
    assert array_literal([1, b"bytes"]) == [1, b"bytes"]
    assert array_literal(["a", 1.5, None]) == '{"a",1.5,NULL}'
    assert columns([{"a": 1, "b": "x"}, {"a": None, "b": 'y"'}]) == {
        "a": "{1,NULL}", "b": '{"x","y\\""}',
    }  # fmt: skip
    # Each column as its type takes it: an integer takes floats (rounded, halves to even,
    # as PostgreSQL casts) and bools; a value it does not take leaves it to psycopg.
    types = {"a": "bigint", "b": "float8", "c": "text", "d": "boolean"}
    row = {"a": 2.0, "b": 1, "c": 5, "d": True}
    assert columns([row], types) == {"a": "{2}", "b": "{1}", "c": [5], "d": "{t}"}
    row = {"a": True, "b": 0.5, "c": "x", "d": 1}
    assert columns([row], types) == {"a": "{1}", "b": "{0.5}", "c": '{"x"}', "d": [1]}
    assert array_literal([0.5, 1.5, 2.5, -2.5], "int") == "{0,2,2,-2}"
    assert array_literal([math.nan], "int") == [math.nan]  # (PostgreSQL refuses it)


def test_floats_in_integer_fields_are_stored_as_before(pg_url: str) -> None:
    # (psycopg's float8[] cast to the integer column: what the store did before literals)
    store = open_store(pg_url)
    try:
        store.enqueue("c", [NewUrl("http://a/1"), NewUrl("http://a/2", priority=1.0)])  # type: ignore[arg-type]
        owner = store.register_worker("c")
        leases = store.lease("c", owner, 2, 60)
        pages = [
            PageOutcome(x, "done", 200.0, body_bytes=10.0,  # type: ignore[arg-type]
                        links=[NewUrl(f"{x.url}/more", priority=2.0)])  # type: ignore[arg-type]
            for x in leases
        ]  # fmt: skip
        assert store.commit_pages("c", pages) == [None, None]
        assert store.stats("c").done == 2
        with pg.connect(pg_url) as db:
            found = db.execute("SELECT url, priority, http_status, body_bytes FROM frontier"
                               " ORDER BY url").fetchall()  # fmt: skip
        assert found == [
            ("http://a/1", 0, 200, 10), ("http://a/1/more", 2, None, None),
            ("http://a/2", 1, 200, 10), ("http://a/2/more", 2, None, None),
        ]  # fmt: skip
    finally:
        store.close()


def test_a_server_set_to_read_null_in_arrays_as_text_changes_nothing(pg_url: str) -> None:
    # array_nulls = off would read the arrays' NULLs as the text "NULL".
    store = open_store(pg_url + "&options=-c%20array_nulls%3Doff")
    try:
        store.enqueue("c", [NewUrl("http://a/1")])
        [lease] = store.lease("c", store.register_worker("c"), 1, 60)
        assert lease.callback is None
        assert store.commit_pages("c", [PageOutcome(lease, "done", 200)]) == [None]
    finally:
        store.close()


def test_a_page_of_odd_text_is_stored_as_it_was_yielded(pg_url: str) -> None:
    store = open_store(pg_url)
    try:
        store.enqueue("c", [NewUrl("http://a/odd")])
        owner = store.register_worker("c")
        [lease] = store.lease("c", owner, 1, 60)
        records = [
            RecordRow.build(id=f"r{n}", source="c", key=text, url=None, data={"text": text})
            for n, text in enumerate(ODD)
        ]
        page = PageOutcome(lease, "done", 200, records=records)
        assert store.commit_pages("c", [page]) == [None]
        stored = {r.id: r.data["text"] for r in store.iter_records("c")}
        assert stored == {f"r{n}": text for n, text in enumerate(ODD)}
    finally:
        store.close()


def analyzed(url: str) -> dict[str, int]:
    """How often each table a page commit writes was analyzed."""
    with pg.connect(url) as db:
        rows = db.execute(
            "SELECT relname, analyze_count FROM pg_stat_user_tables"
            " WHERE schemaname = current_schema()"
            " AND relname IN ('lease_grants', 'records', 'record_pages')"
        ).fetchall()
    return dict(rows)


def commit_pages(store: Store, pages: int, every: Callable[[int], None] | None = None) -> None:
    """Commit ``pages`` pages of a record each, 16 a group, as a worker does; call
    ``every`` (if any) with the count after each group."""
    store.enqueue("c", [NewUrl(f"http://a/{n}") for n in range(pages + 16)])
    owner = store.register_worker("c")
    leases = store.lease("c", owner, 16, 60)
    done = 0
    while done < pages:
        outcomes = [
            PageOutcome(x, "done", 200, records=[RecordRow.build(
                id=f"r{x.frontier_id}", source="c", key="k", url=None, data={},
            )])
            for x in leases
        ]  # fmt: skip
        _, leases = store.commit_and_lease("c", outcomes, owner=owner, limit=16,
                                           lease_seconds=60)  # fmt: skip
        done += len(outcomes)
        if every is not None:
            every(done)


def test_the_tables_a_commit_writes_are_analyzed_as_they_grow(pg_url: str) -> None:
    store = open_store(pg_url)
    before = analyzed(pg_url)

    def not_yet(done: int) -> None:
        if done == 496:
            assert analyzed(pg_url) == before

    try:
        commit_pages(store, 1008, not_yet)  # (the first analysis comes at the 1000th page)
        after = analyzed(pg_url)
        assert all(after[t] == before.get(t, 0) + 1 for t in after), (before, after)
    finally:
        store.close()


def test_a_commit_does_not_wait_for_a_table_it_cannot_analyze_now(pg_url: str) -> None:
    # A VACUUM (crashsafe vacuum), say, holds the lock an ANALYZE of lease_grants needs.
    store = open_store(pg_url)
    holder = pg.connect(pg_url)
    finished = threading.Event()
    try:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE lease_grants IN SHARE UPDATE EXCLUSIVE MODE")
        worker = threading.Thread(target=lambda: (commit_pages(store, 1008),
                                                  finished.set()))  # fmt: skip
        worker.start()
        # While the lock is held: the analysis is left for later, the commits go on.
        assert finished.wait(120), "the page commits waited for a lock held elsewhere"
        holder.execute("ROLLBACK")
        worker.join()
        assert store.stats("c").done == 1008
    finally:
        holder.close()
        store.close()
