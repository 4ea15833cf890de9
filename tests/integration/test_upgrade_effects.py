"""Databases of an earlier crashsafe, upgraded. One crawled before the outbox existed
(SQLite schema 4, PostgreSQL 2): every record gets an event in the outbox backlog, and
its page is known, so a recrawl that finds the page gone marks the record gone. One from
before page listings (SQLite 13, PostgreSQL 11): each page lists the records its kept ids
name."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from crashsafe.crawl.revisits import validators_of
from crashsafe.errors import SchemaError
from crashsafe.store import NewUrl, PageOutcome, RecordRow, Store, open_store
from crashsafe.store import postgres as pg_store
from crashsafe.store import sqlite as sqlite_store
from tests import pg
from tests.clock import ManualClock

PAGE = "http://a/1"
HOUR = 3600.0
RECORD = ("c", "id-k", "s", "k", PAGE, "h", '{"price": "1"}', 1.0, 1.0, 1)
INSERT_RECORD = (
    "INSERT INTO records (crawl, id, source, key, url, content_hash, data, first_seen, "
    "last_changed, version) VALUES ({})"
)


def old_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    with monkeypatch.context() as m:
        m.setattr(sqlite_store, "MIGRATIONS", sqlite_store.MIGRATIONS[:4])
        open_store(url, create=True).close()
    with sqlite3.connect(tmp_path / "old.db") as db:
        db.execute(
            "INSERT INTO frontier (crawl, url, state, added_at, done_at) "
            "VALUES ('c', ?, 'done', 1, 1)",
            (PAGE,),
        )
        db.execute(INSERT_RECORD.format(",".join("?" * 10)), RECORD)
    return url


def old_postgres(url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as m:
        m.setattr(pg_store, "MIGRATIONS", pg_store.MIGRATIONS[:2])
        open_store(url, create=True).close()
    with pg.connect(url) as db:
        db.execute(
            "INSERT INTO frontier (crawl, url, url_hash, origin, state, added_at, done_at) "
            "VALUES ('c', %s, sha256(convert_to(%s, 'UTF8')), 'http://a', 'done', "
            "to_timestamp(1), to_timestamp(1))",
            (PAGE, PAGE),
        )
        values = "%s, %s, %s, %s, %s, %s, %s::jsonb, to_timestamp(%s), to_timestamp(%s), %s"
        db.execute(INSERT_RECORD.format(values), RECORD)
    return url


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_records_stored_before_the_upgrade_get_events_and_can_go(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        url = old_sqlite(tmp_path, monkeypatch)
    else:
        url = old_postgres(str(request.getfixturevalue("pg_url")), monkeypatch)
    store: Store
    with contextlib.closing(open_store(url)) as store:  # upgrades
        owner = store.register_worker()
        endpoint = store.endpoint("c", "http://127.0.0.1:9/hook")
        [event] = store.lease_deliveries(endpoint.id, owner, 10, 60)
        assert (event.record_id, event.version, event.type) == ("id-k", 1, "record.created")
        assert store.recrawl("c").requeued == 1
        [lease] = store.lease("c", owner, 10, 60)
        assert store.commit_pages("c", [PageOutcome(lease, "done", 404)]) == [None]
        assert store.finish_pass("c") == 1
        [gone] = store.iter_records("c", since=1.0)
        assert gone.gone_at is not None and gone.version == 2
        store.enqueue("c", [NewUrl("http://a/2")])  # and the store works on as usual


#: what the schema versions after page listings added (grant totals, retired pages,
#: offsite counts)
LATER = ("DROP TABLE grant_totals", "DROP INDEX frontier_retired",
         "ALTER TABLE frontier DROP COLUMN gone_streak",
         "ALTER TABLE frontier DROP COLUMN links_offsite")  # fmt: skip
#: and on PostgreSQL, lighter page commits (version 14): the trigger and index before it
LATER_PG = (
    "DROP TRIGGER records_created ON records",
    "DROP FUNCTION crashsafe_records_created()",
    "CREATE TRIGGER records_created AFTER INSERT ON records"
    " FOR EACH ROW EXECUTE FUNCTION crashsafe_record_event()",
    "DROP INDEX lease_grants_crawl",
    "CREATE INDEX lease_grants_crawl ON lease_grants (crawl, outcome)",
    "ALTER TABLE lease_grants RESET (fillfactor)",
)


def back_to_before_listings(url: str) -> None:
    """The database as a crashsafe before page listings (SQLite 13, PostgreSQL 11) left it."""
    if url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            for statement in LATER:
                db.execute(statement)
            db.execute("DROP TABLE record_pages")
            db.execute("ALTER TABLE frontier DROP COLUMN listed")
            db.execute("PRAGMA user_version = 12")
            db.commit()
    else:
        with pg.connect(url) as db:
            for statement in LATER_PG + LATER:
                db.execute(statement)
            db.execute("DROP TABLE record_pages")
            db.execute("ALTER TABLE frontier DROP COLUMN listed")
            db.execute("UPDATE crashsafe_schema SET version = 10")


def test_an_upgrade_knows_every_page_that_lists_a_record_from_the_pages_validators(
    any_db_url: str,
) -> None:
    """x on /p and /q (/q yielded it last); after the upgrade a pass that fetches /q alone,
    which dropped x, leaves x (/p's kept ids list it); /p dropping it too makes it gone."""
    clock = ManualClock()
    p, q = "http://a/p", "http://a/q"
    x = RecordRow.build(id="id-x", source="s", key="x", url=None, data={"price": "1"})
    with contextlib.closing(open_store(any_db_url, clock=clock)) as store:
        store.enqueue("c", [NewUrl(p), NewUrl(q)])
        leased = {lease.url: lease for lease in store.lease("c", store.register_worker(), 9, 60)}
        for url, hours in ((p, 5), (q, 1)):
            kept = validators_of({}, "digest", "spider", url, ["id-x"])
            done = PageOutcome(leased[url], "done", 200, records=[x], validators=kept,
                               revisit_in=hours * HOUR)  # fmt: skip
            assert store.commit_pages("c", [done]) == [None]
    back_to_before_listings(any_db_url)

    def visit(url: str) -> tuple[int, bool]:
        assert store.begin_pass("c").started is not None
        [lease] = store.lease("c", store.register_worker(), 9, 60)
        assert lease.url == url and lease.listed  # (its listing, from before the upgrade)
        dropped = PageOutcome(lease, "done", 200, revisit_in=100 * HOUR)
        assert store.commit_pages("c", [dropped]) == [None]
        store.finish_pass("c")
        [record] = store.iter_records("c", since=0.0)
        return record.version, record.gone_at is not None

    with contextlib.closing(open_store(any_db_url, clock=clock)) as store:  # upgrades
        clock.advance(HOUR)
        assert visit(q) == (1, False)
        clock.advance(4 * HOUR)
        assert visit(p) == (2, True)


def test_a_writing_command_upgrades_an_older_postgresql_schema_a_reading_one_refuses(
    pg_url: str,
) -> None:
    """As on SQLite: `crashsafe recrawl` (create=False, writing) upgrades the schema that
    is there; `status` (readonly) refuses it, saying why, and changes nothing."""
    open_store(pg_url).close()
    back_to_before_listings(pg_url)
    with pytest.raises(SchemaError, match="older crashsafe"):
        open_store(pg_url, readonly=True)
    with contextlib.closing(open_store(pg_url, create=False)) as store:
        assert store.crawls() == []
    with pg.connect(pg_url) as db:
        now = len(pg_store.MIGRATIONS)  # (the latest)
        assert db.execute("SELECT version FROM crashsafe_schema").fetchone() == (now,)
