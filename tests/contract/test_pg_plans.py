"""PostgreSQL plans that must not depend on the statistics of the moment: psycopg prepares
a statement run five times, and the server may keep a generic plan of it, made with the
statistics of that time, for as long as the connection lives."""

from __future__ import annotations

import re

from crashsafe.store import NewUrl, PageOutcome, open_store
from crashsafe.store.queries import load_queries
from tests import pg

#: Statements that look rows of a state up by id (queries.sql's header says why the form).
BY_ID = ["mark_done", "mark_retry", "mark_failed", "release_url", "renew_leases",
         "current_grants", "release_lapsed_out", "shift_ids_out"]  # fmt: skip


def numbered(sql: str) -> tuple[str, int]:
    """``sql`` with its %(name)s placeholders as $1, $2, ...; and how many there are."""
    names: dict[str, int] = {}
    text = re.sub(r"%\((\w+)\)s", lambda m: f"${names.setdefault(m[1], len(names) + 1)}", sql)
    return text, len(names)


def test_rows_are_looked_up_by_id_whatever_the_statistics_say(pg_url: str) -> None:
    store = open_store(pg_url)
    queries = load_queries("postgres")
    try:
        store.enqueue("c", [NewUrl(f"http://a/{n}") for n in range(2000)])
        owner = store.register_worker("c")
        for _ in range(4):
            leases = store.lease("c", owner, 500, 600)
            store.commit_pages("c", [PageOutcome(x, "done", 200) for x in leases])
        with pg.connect(pg_url) as db:
            db.execute("ANALYZE frontier")  # none pending or leased: their indexes look empty
        store.enqueue("c", [NewUrl(f"http://b/{n}") for n in range(500)])
        store.lease("c", owner, 64, 600)
        with pg.connect(pg_url) as db:
            db.execute("SET plan_cache_mode = force_generic_plan")
            for name in BY_ID:
                sql, n = numbered(queries[name])
                db.execute(f"PREPARE q AS {sql}")
                args = ", ".join(["NULL"] * n)
                plan = "\n".join(r[0] for r in db.execute(f"EXPLAIN EXECUTE q({args})"))
                db.execute("DEALLOCATE q")
                assert "frontier_leased" not in plan, (name, plan)
                assert "frontier_pending" not in plan, (name, plan)
                assert "frontier_pkey" in plan, (name, plan)
    finally:
        store.close()
