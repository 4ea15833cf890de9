"""SQLite backend: one file, WAL mode, several processes may share it.

Write transactions start with ``BEGIN IMMEDIATE`` so two processes never deadlock on a
lock upgrade; ``busy_timeout`` makes them queue instead of failing. Liveness locks are
files beside the database (``liveness.py``). The rules are ``core.py``'s; this module is
the connection: opening, migrating (``PRAGMA user_version``), transactions, errors.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from crashsafe.errors import SchemaError, StoreError
from crashsafe.files import create_private
from crashsafe.store.core import SQLStore
from crashsafe.store.liveness import LockDir
from crashsafe.store.queries import load_migrations, load_queries, upgrade_said
from crashsafe.store.sql_base import Claimed, Params, Tx, fenced_by_count, first
from crashsafe.store.sqlite_errors import why as _why
from crashsafe.store.values import WalState

T = TypeVar("T")
Q = load_queries("sqlite")
MIGRATIONS = load_migrations("sqlite")
SYNCHRONOUS = {"full", "normal", "off", "extra"}
BUSY_TIMEOUT_MS = 60_000  # a writer waits this long for another process's write lock
WAL_TRUNCATE_BYTES = 8 * 2**20  # a WAL this large is checkpointed and truncated by the crawl
WAL_KEEP_BYTES = 4 * 2**20  # journal_size_limit: what a WAL shrinks back to


def _bind(params: Params) -> Params:
    """Lists bind as JSON arrays (the queries read them with json_each)."""
    if any(isinstance(v, list) for v in params.values()):
        return {k: json.dumps(v) if isinstance(v, list) else v for k, v in params.items()}
    return params


def _positional(sql: str) -> tuple[str, Callable[[Params], tuple[Any, ...]]]:
    """``sql`` with its ``:name`` parameters numbered (``?1``), and what turns a mapping
    into their values: sqlite3 binds a tuple at a fraction of a mapping's cost, which
    counts for the rows of a group commit."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"?{names.index(match.group(1)) + 1}"

    numbered = re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", number, sql)
    if len(names) < 2:  # itemgetter of one name gives the value, not a tuple
        return numbered, lambda row: tuple(row[name] for name in names)
    return numbered, operator.itemgetter(*names)


#: The queries run with executemany, numbered once.
MANY = {name: _positional(sql) for name, sql in Q.items()}


class _Tx:
    """A transaction on the store's connection, running its named queries."""

    __slots__ = ("db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def rows(self, name: str, params: Params) -> list[tuple[Any, ...]]:
        return self.db.execute(Q[name], _bind(params)).fetchall()

    def run(self, name: str, params: Params) -> int:
        return self.db.execute(Q[name], _bind(params)).rowcount

    def many(self, name: str, rows: Sequence[Params]) -> int:
        sql, values = MANY[name]
        return self.db.executemany(sql, map(values, rows)).rowcount

    def fenced(self, name: str, rows: Sequence[Params]) -> None:
        fenced_by_count(self, name, rows)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        self.db.execute("SAVEPOINT page")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK TO page")
            raise
        finally:
            self.db.execute("RELEASE page")


def _statements(script: str) -> Iterator[str]:
    """Split an SQL script into statements (executescript would commit midway)."""
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            yield buffer.strip()
            buffer = ""


class SQLiteStore(SQLStore):
    """The embedded default store. Open it with ``open_store("sqlite:///path.db")``."""

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: str = "full",
        url: str = "",
        create: bool = True,
        readonly: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.path = Path(path)
        self._clock = clock or time.time
        self.url = url or f"sqlite:///{self.path}"
        if self.path.is_dir():
            raise StoreError(
                f"{self.path} is a folder, not a database file: give a file in it, e.g. "
                f"--db sqlite:///{self.path / 'crawl.db'}"
            )
        if (readonly or not create) and not self.path.exists():
            raise StoreError(f"database {self.path} does not exist: check --db")
        self._locks = LockDir(self.path.with_name(self.path.name + "-workers"))
        self._readonly = readonly
        if readonly:
            self._db = self._open_readonly()
            return
        if synchronous not in SYNCHRONOUS:
            raise StoreError(f"synchronous={synchronous!r}: use one of {sorted(SYNCHRONOUS)}")
        if not self.path.parent.exists():
            raise StoreError(
                f"cannot create database {self.path}: folder {self.path.parent} does not exist"
            )
        try:
            create_private(self.path)  # 0600; SQLite gives its -wal and -shm files that mode
        except OSError as exc:
            raise StoreError(
                f"cannot create database {self.path}: {exc.strerror or exc} (a read-only "
                "file system, or no permission): choose a folder you can write with --db"
            ) from None
        try:
            self._db = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT_MS / 1000,
            )
            self._db.execute("PRAGMA journal_mode=WAL")
            # A WAL that grew (a reader held an old snapshot) shrinks back to this once
            # a checkpoint gets through.
            self._db.execute(f"PRAGMA journal_size_limit = {WAL_KEEP_BYTES}")
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
        with self._write() as tx:  # inside the write lock: two processes may race here
            db = tx.db
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
            with upgrade_said(str(self.path), current, latest):
                for version, script in MIGRATIONS:
                    if version > current:
                        for statement in _statements(script):
                            db.execute(statement)
                        db.execute(f"PRAGMA user_version = {version}")

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield _Tx(self._db)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        self._db.execute("BEGIN")  # deferred: a read snapshot, no write lock
        try:
            yield _Tx(self._db)
        finally:
            self._db.execute("COMMIT")

    def _run(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except sqlite3.Error as exc:
            raise StoreError(f"database {self.path}: {_why(self.path, exc) or exc}") from exc

    def _now(self) -> float:
        return self._clock()

    def close(self) -> None:
        self.unregister_worker()
        if not self._readonly:
            with contextlib.suppress(sqlite3.Error):
                self.tend_wal(at_least=0)  # the WAL a crawl leaves is empty, if it can be
        self._db.close()

    def compact(self) -> tuple[int, int]:
        """VACUUM the database file: the space of deleted rows goes back to the file
        system. It rewrites the whole file and holds the write lock meanwhile: run it
        while no crawl writes. Returns the bytes of the file and its WAL before and
        after."""

        def size() -> int:
            return sum(
                p.stat().st_size
                for p in (self.path, self.path.with_name(self.path.name + "-wal"))
                if p.exists()
            )

        def go() -> tuple[int, int]:
            before = size()
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.execute("VACUUM")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return before, size()

        return self._run(go)

    def tend_wal(self, *, at_least: int | None = None) -> WalState | None:
        """Checkpoint the WAL into the database and truncate it, once it holds
        ``at_least`` bytes, without waiting for anyone: SQLite's own checkpoints cannot
        reset a WAL while a reader holds an old snapshot, and it then grows for as long
        as the reader stays (an export whose output nobody reads did, before exports read
        in short transactions). Returns the WAL's size and whether a reader held it back
        (None: nothing to do). ``at_least`` defaults to ``WAL_TRUNCATE_BYTES``."""
        if at_least is None:
            at_least = WAL_TRUNCATE_BYTES
        wal = self.path.with_name(self.path.name + "-wal")
        try:
            size = wal.stat().st_size
        except FileNotFoundError:
            return None
        if size < at_least or size == 0:
            return None
        self._db.execute("PRAGMA busy_timeout = 0")  # never wait: another look later
        try:
            busy, frames, copied = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.OperationalError:  # locked by a writer of another process
            return WalState(size, held=False)
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Busy with frames left behind: a reader's snapshot still needs them.
        return WalState(size, held=bool(busy) and 0 <= copied < frames)

    # -- claims ----------------------------------------------------------------------------
    def _claim_due(self, tx: Tx, p: Params) -> list[Claimed]:
        return self._grant(tx, p, tx.rows("lease_due", p))

    def _claim_ids(self, tx: Tx, p: Params, ids: list[int]) -> list[Claimed]:
        return self._grant(tx, p, tx.rows("lease_ids", {**p, "ids": ids}))

    @staticmethod
    def _grant(tx: Tx, p: Params, rows: list[tuple[Any, ...]]) -> list[Claimed]:
        """One lease_grants row per URL just leased; its id becomes the URL's grant."""
        if not rows:
            return []
        grants = dict(tx.rows("add_grants", {**p, "ids": [r[0] for r in rows]}))
        tx.many("set_grant", [{"grant": g, "id": fid} for fid, g in grants.items()])
        version = first(tx.rows("cookie_jar_version", p))
        return [(*r[:7], grants[r[0]], version, *r[7:]) for r in rows]

    # -- liveness: lock files beside the database ------------------------------------------
    def _take_liveness(self, owner: str, tx: Tx) -> None:
        self._locks.acquire(owner)

    def _drop_liveness(self, owner: str) -> None:
        self._locks.release(owner)

    def _alive(self, tx: Tx, owners: Sequence[str]) -> set[str]:
        return {o for o in owners if self._locks.is_alive(o)}

    def _fold(self, tx: Tx, ids: list[int]) -> int:
        # (one write transaction at a time: nothing changes between the two)
        tx.run("fold_grants", {"ids": ids})
        return tx.run("drop_folded", {"ids": ids})
