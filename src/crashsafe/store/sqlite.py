"""SQLite backend: one file, WAL mode, several processes may share it.

Write transactions start with ``BEGIN IMMEDIATE`` so two processes never deadlock on a
lock upgrade; ``busy_timeout`` makes them queue instead of failing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

from crashsafe.errors import SchemaError, StoreError
from crashsafe.files import create_private
from crashsafe.store.base import (
    STALE,
    CrawlStats,
    Due,
    FailedUrl,
    Lease,
    NewUrl,
    PageOutcome,
    StoredRecord,
    storable,
)
from crashsafe.store.liveness import LockDir, new_owner_id
from crashsafe.store.queries import load_migrations, load_queries
from crashsafe.store.sqlite_errors import why as _why
from crashsafe.store.sqlite_robots import SQLiteRobots
from crashsafe.store.stats import crawl_stats

T = TypeVar("T")
Q = load_queries("sqlite")
MIGRATIONS = load_migrations("sqlite")
SYNCHRONOUS = {"full", "normal", "off", "extra"}


class _StaleInGroup(Exception):
    """A group commit met a lease that is no longer current: redo it page by page."""


def _origin_range(url: str, at: float, crawl: str) -> dict[str, object]:
    """Parameters of ``hold_back_origin`` for the origin of canonical ``url``: every URL
    of origin O sorts between "O/" and "O0"."""
    origin = "/".join(url.split("/", 3)[:3])  # scheme://host[:port]
    return {"at": at, "crawl": crawl, "low": origin + "/", "high": origin + "0"}


def _statements(script: str) -> Iterator[str]:
    """Split an SQL script into statements (executescript would commit midway)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""


class SQLiteStore(SQLiteRobots):
    """The embedded default store. Open it with ``open_store("sqlite:///path.db")``."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        url: str = "",
        create: bool = True,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path)
        self.url = url or f"sqlite:///{self.path}"
        if (readonly or not create) and not self.path.exists():
            raise StoreError(f"database {self.path} does not exist: check --db")
        self._locks = LockDir(self.path.with_name(self.path.name + "-workers"))
        self._owner: str | None = None
        if readonly:
            self._db = self._open_readonly()
            return
        if synchronous not in SYNCHRONOUS:
            raise StoreError(f"synchronous={synchronous!r}: use one of {sorted(SYNCHRONOUS)}")
        if not self.path.parent.exists():
            raise StoreError(
                f"cannot create database {self.path}: folder {self.path.parent} does not exist"
            )
        create_private(self.path)  # 0600; SQLite gives its -wal and -shm files the same mode
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=60
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            hint = _why(self.path, exc)
            if hint:
                raise StoreError(f"cannot open {self.path}: {hint}") from exc
            raise StoreError(f"cannot open {self.path} as a crashsafe database: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot create {self.path}: {exc.strerror or exc}") from exc

    def _open_readonly(self) -> sqlite3.Connection:
        """A connection that never writes: no migration, no lock to wait for (WAL readers
        do not wait for writers), and, when its folder cannot be written (a read-only file
        system), no -shm file to create: the file is then opened as immutable, which is
        safe only because nobody can be writing it either."""
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        try:
            db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            version = db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if os.access(self.path.parent, os.W_OK):
                raise StoreError(f"cannot read {self.path}: {_why(self.path, exc) or exc}") from exc
            try:
                db = sqlite3.connect(
                    uri + "&immutable=1", uri=True, isolation_level=None, check_same_thread=False
                )
                version = db.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"cannot read {self.path}: {_why(self.path, exc) or exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open {self.path} as a crashsafe database: {exc}") from exc
        latest = MIGRATIONS[-1][0]
        if version == latest:
            return db
        db.close()
        if version > latest:
            raise SchemaError(
                f"{self.path} has schema version {version}, this crashsafe knows up to "
                f"{latest}: upgrade crashsafe"
            )
        if version == 0:
            raise SchemaError(
                f"{self.path} is an SQLite database but not a crashsafe one: choose another "
                "file with --db"
            )
        raise SchemaError(
            f"{self.path} was written by an older crashsafe (schema version {version}): run "
            "`crashsafe crawl` on it once with this version (it upgrades the file), then read it"
        )

    # -- plumbing ------------------------------------------------------------------------
    def _migrate(self) -> None:
        latest = MIGRATIONS[-1][0]
        with self._write() as db:  # inside the write lock: two processes may race here
            current = db.execute("PRAGMA user_version").fetchone()[0]
            if current > latest:
                raise SchemaError(
                    f"{self.path} has schema version {current}, this crashsafe knows up to "
                    f"{latest}: upgrade crashsafe"
                )
            if current == 0:
                tables = db.execute(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                ).fetchone()[0]
                if tables:
                    raise SchemaError(
                        f"{self.path} is an SQLite database but not a crashsafe one: "
                        "choose another file with --db"
                    )
            for version, script in MIGRATIONS:
                if version > current:
                    for statement in _statements(script):
                        db.execute(statement)
                    db.execute(f"PRAGMA user_version = {version}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    def _run(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sqlite3.Error as exc:
            raise StoreError(f"database {self.path}: {_why(self.path, exc) or exc}") from exc

    def close(self) -> None:
        self.unregister_worker()
        self._db.close()

    # -- workers -------------------------------------------------------------------------
    def register_worker(self) -> str:
        if self._owner is None:
            self._owner = new_owner_id()
            self._locks.acquire(self._owner)
        return self._owner

    def unregister_worker(self) -> None:
        if self._owner is not None:
            self._locks.release(self._owner)
            self._owner = None

    def reclaim_dead_workers(self, crawl: str) -> int:
        def go() -> int:
            owners = [r[0] for r in self._db.execute(Q["live_owners"], (crawl,))]
            dead = [o for o in owners if not self._locks.is_alive(o)]
            if not dead:
                return 0
            with self._write() as db:
                return sum(db.execute(Q["release_owner"], (crawl, o)).rowcount for o in dead)

        return self._run(go)

    # -- frontier ------------------------------------------------------------------------
    def enqueue(self, crawl: str, urls: Iterable[NewUrl]) -> int:
        now = time.time()
        rows = [(crawl, u.url, u.depth, u.callback, u.priority, now) for u in urls]

        def go() -> int:
            with self._write() as db:
                before = db.total_changes
                db.executemany(Q["enqueue_url"], rows)
                return db.total_changes - before

        return self._run(go)

    def lease(self, crawl: str, owner: str, limit: int, lease_seconds: float) -> list[Lease]:
        if limit <= 0:
            return []

        def go() -> list[Lease]:
            with self._write() as db:
                return self._lease_in(db, crawl, owner, limit, lease_seconds)

        return self._run(go)

    def _lease_in(
        self, db: sqlite3.Connection, crawl: str, owner: str, limit: int, lease_seconds: float
    ) -> list[Lease]:
        """Lease inside the caller's write transaction, recording one grant per URL."""
        if limit <= 0:  # and never pass it to SQL: LIMIT -1 means no limit at all
            return []
        now = time.time()
        db.execute(Q["expire_leases"], (crawl, now))
        params = {
            "owner": owner,
            "expires": now + lease_seconds,
            "crawl": crawl,
            "now": now,
            "limit": limit,
        }
        # RETURNING does not keep the subquery's order: restore it.
        rows = sorted(db.execute(Q["lease_urls"], params).fetchall(), key=lambda r: (-r[5], r[0]))
        if not rows:
            return []
        values = ",".join(["(?, ?, ?, ?)"] * len(rows))
        args: list[object] = []
        for row in rows:
            args += [crawl, row[0], owner, now]
        grants = dict(
            db.execute(
                "INSERT INTO lease_grants (crawl, frontier_id, owner, granted_at) "
                f"VALUES {values} RETURNING frontier_id, id",
                args,
            ).fetchall()
        )
        db.executemany(Q["set_grant"], [(g, fid) for fid, g in grants.items()])
        return [
            Lease(fid, url, depth, attempts, callback, grants[fid])
            for fid, url, depth, attempts, callback, _priority in rows
        ]

    def renew(self, crawl: str, leases: Sequence[Lease], lease_seconds: float) -> list[Lease]:
        if not leases:
            return []
        params: dict[str, object] = {
            "ids": json.dumps([x.frontier_id for x in leases]),
            "grants": json.dumps([x.grant_id for x in leases]),
        }

        def go() -> set[int]:
            with self._write() as db:
                params["expires"] = time.time() + lease_seconds
                return {row[0] for row in db.execute(Q["renew_leases"], params)}

        held = self._run(go)
        return [x for x in leases if x.grant_id not in held]

    def release(self, crawl: str, leases: Iterable[tuple[Lease, bool]]) -> None:
        items = list(leases)

        def go() -> None:
            with self._write() as db:
                for lease, fetched in items:
                    db.execute(Q["release_url"], (int(fetched), lease.frontier_id, lease.grant_id))
                    outcome = "abandoned" if fetched else "released"
                    db.execute(Q["release_grant"], (outcome, lease.grant_id))

        self._run(go)

    def _apply(
        self, db: sqlite3.Connection, crawl: str, pages: Sequence[PageOutcome], *, checked: bool
    ) -> list[bool]:
        """Write ``pages`` in the caller's transaction; return per page whether it was
        refused as stale (its lease is no longer the current grant: nothing written).

        ``checked`` looks the current grants up first. Without it every page is taken to
        be current, and :class:`_StaleInGroup` is raised (the caller rolls back) as soon
        as one fenced state update matches no row: one query less for the common case.
        """
        if not pages:
            return []
        now = time.time()
        current: dict[int, int] = {}
        if checked:
            ids = json.dumps([p.lease.frontier_id for p in pages])
            current = dict(db.execute(Q["current_grants"], (ids,)).fetchall())
        records, links, done, retry, failed, grants = [], [], [], [], [], []
        stale: list[bool] = []
        for p in pages:
            fid, grant = p.lease.frontier_id, p.lease.grant_id
            if checked and current.pop(fid, None) != grant:  # (pop: the same lease twice)
                stale.append(True)
                grants.append(("stale", grant))
                continue
            stale.append(False)
            grants.append((p.kind, grant))
            error = None if p.error is None else storable(p.error)
            if p.kind == "done" or p.kind == "skipped":
                done.append((p.http_status, error, now, p.links_skipped, fid, grant))
                records += [
                    (crawl, r.id, r.source, r.key, r.url, r.content_hash, r.data_json, now, now)
                    for r in p.records
                ]
                links += [(crawl, u.url, u.depth, u.callback, u.priority, now) for u in p.links]
            elif p.kind == "retry" or p.kind == "deferred":
                counted = int(p.kind == "retry")
                retry.append((counted, p.http_status, error, p.next_attempt_at, fid, grant))
            else:
                failed.append((p.http_status, error, now, fid, grant))
        # The fenced state updates first: nothing else of a stale page may be written.
        marked = 0
        for name, rows in (("mark_done", done), ("mark_retry", retry), ("mark_failed", failed)):
            if rows:
                marked += db.executemany(Q[name], rows).rowcount
        if marked != len(done) + len(retry) + len(failed):
            if checked:  # cannot happen: the grants were read in this transaction
                raise StoreError("a fenced update missed a row that was current")
            raise _StaleInGroup
        db.executemany(Q["upsert_record"], records)
        db.executemany(Q["enqueue_url"], links)
        db.executemany(Q["set_grant_outcome"], grants)
        deferred = [p for p, was_stale in zip(pages, stale, strict=True) if not was_stale]
        held = [_origin_range(p.lease.url, p.next_attempt_at, crawl) for p in deferred
                if p.kind == "deferred"]  # fmt: skip
        if held:
            db.executemany(Q["hold_back_origin"], held)
        return stale

    def commit_pages(self, crawl: str, outcomes: Sequence[PageOutcome]) -> list[str | None]:
        errors, _ = self.commit_and_lease(crawl, outcomes, owner="", limit=0, lease_seconds=0)
        return errors

    def commit_and_lease(
        self,
        crawl: str,
        outcomes: Sequence[PageOutcome],
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
    ) -> tuple[list[str | None], list[Lease]]:
        if not outcomes and limit <= 0:
            return [], []

        def go() -> tuple[list[str | None], list[Lease]]:
            # Fast path: the whole group in one go, every lease taken to be current. If
            # one is not (stale), or anything fails (the database, or a value it cannot
            # take), redo page by page under savepoints, grants checked first, so one bad
            # page cannot take its neighbours down.
            try:
                with self._write() as db:
                    self._apply(db, crawl, outcomes, checked=False)
                    leases = self._lease_in(db, crawl, owner, limit, lease_seconds)
                return [None] * len(outcomes), leases
            except Exception:
                if not outcomes:
                    raise
            errors: list[str | None] = []
            with self._write() as db:
                for page in outcomes:
                    db.execute("SAVEPOINT page")
                    try:
                        [was_stale] = self._apply(db, crawl, [page], checked=True)
                    except Exception as exc:
                        db.execute("ROLLBACK TO page")
                        reason = f"{type(exc).__name__}: {exc}"
                        errors.append(storable(f"{page.lease.url}: cannot be stored: {reason}"))
                    else:
                        errors.append(STALE if was_stale else None)
                    db.execute("RELEASE page")
                # A page that failed to commit keeps its slot until its failure is stored.
                kept = sum(1 for error in errors if error is not None and error != STALE)
                leases = self._lease_in(db, crawl, owner, limit - kept, lease_seconds)
            return errors, leases

        return self._run(go)

    def due(self, crawl: str) -> Due:
        def go() -> Due:
            pending = self._db.execute(Q["next_pending"], (crawl,)).fetchone()[0]
            expiry = self._db.execute(Q["next_lease_expiry"], (crawl,)).fetchone()[0]
            times = [t for t in (pending, expiry) if t is not None]
            return Due(open=bool(times), next_at=min(times) if times else None)

        return self._run(go)

    # -- reading -------------------------------------------------------------------------
    def crawls(self) -> list[str]:
        return self._run(lambda: [r[0] for r in self._db.execute(Q["list_crawls"])])

    def stats(self, crawl: str) -> CrawlStats:
        def go() -> CrawlStats:
            db = self._db
            db.execute("BEGIN")  # one snapshot for every count: workers commit meanwhile
            try:
                return self._stats_in(db, crawl)
            finally:
                db.execute("COMMIT")

        return self._run(go)

    def _stats_in(self, db: sqlite3.Connection, crawl: str) -> CrawlStats:
        return crawl_stats(
            crawl,
            states=dict(db.execute(Q["count_states"], (crawl,)).fetchall()),
            records=db.execute(Q["count_records"], (crawl,)).fetchone()[0],
            outcomes=dict(db.execute(Q["count_grants"], (crawl,)).fetchall()),
            active=db.execute(Q["count_active_grants"], (crawl,)).fetchone()[0],
            links_skipped=db.execute(Q["count_links_skipped"], (crawl,)).fetchone()[0],
        )

    def failed(self, crawl: str | None = None) -> list[FailedUrl]:
        rows = self._run(lambda: self._db.execute(Q["list_failed"], (crawl, crawl)).fetchall())
        return [FailedUrl(*row) for row in rows]

    def retry_failed(self, crawl: str | None = None) -> int:
        def go() -> int:
            with self._write() as db:
                return db.execute(Q["requeue_failed"], (crawl, crawl)).rowcount

        return self._run(go)

    def iter_records(
        self, crawl: str | None = None, *, since: float = 0.0
    ) -> Iterator[StoredRecord]:
        cursor = self._run(lambda: self._db.execute(Q["iter_records"], (crawl, crawl, since)))
        for crawl_, id_, source, key, url, version, first_seen, last_changed, data in cursor:
            yield StoredRecord(
                crawl_, id_, source, key, url, version, first_seen, last_changed, json.loads(data)
            )
