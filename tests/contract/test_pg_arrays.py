"""PostgreSQL array literals the store writes itself (store/postgres_arrays.py): every
value reads back as it was sent, whatever its characters; and the tables a page commit
writes are analyzed again as the store commits pages (store/postgres.py)."""

from __future__ import annotations

import math

from crashsafe.store import NewUrl, PageOutcome, RecordRow, open_store
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


def test_the_tables_a_commit_writes_are_analyzed_as_they_grow(pg_url: str) -> None:
    store = open_store(pg_url)
    pages = 1008  # (the first analysis comes at the thousandth page)

    def analyzed() -> dict[str, int]:
        with pg.connect(pg_url) as db:
            rows = db.execute(
                "SELECT relname, analyze_count FROM pg_stat_user_tables"
                " WHERE schemaname = current_schema()"
                " AND relname IN ('lease_grants', 'records', 'record_pages')"
            ).fetchall()
        return dict(rows)

    try:
        store.enqueue("c", [NewUrl(f"http://a/{n}") for n in range(pages + 16)])
        owner = store.register_worker("c")
        leases = store.lease("c", owner, 16, 60)
        before = analyzed()
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
            if done == 496:
                assert analyzed() == before
        after = analyzed()
        assert all(after[t] == before.get(t, 0) + 1 for t in after), (before, after)
    finally:
        store.close()
