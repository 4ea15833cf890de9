"""PostgreSQL backend: many workers on many machines, one frontier.

``postgresql://user[:password]@host[:port]/db[?schema=name&...]`` (also ``postgres://``;
other parameters go to libpq as they are). The rules are ``core.py``'s; this module is the
connection (psycopg 3): opening, migrating, transactions, errors, reconnecting.

- Time is the database's (``now()``), so workers whose clocks disagree still agree on
  leases and backoffs; an injected clock (tests) replaces it.
- Claims skip the rows other workers are claiming (``FOR UPDATE SKIP LOCKED``).
- Liveness: each worker holds a session advisory lock (the schema's key, its worker id)
  for the life of its connection; a worker that finds a peer's lock free takes that
  peer's leases back at once. Lease expiry stays the backstop (a network partition).
- Migrations run under an advisory lock, so many workers may start at once.
- A lost connection (a restarted server, ``pg_terminate_backend``) is reopened with
  backoff and the call run again whole: every write is fenced or idempotent, so a
  commit whose answer was lost, run again, changes nothing (its pages come back stale).
"""

from __future__ import annotations

import logging
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar

from crashsafe.errors import ConfigError, SchemaError, StoreError
from crashsafe.store import masked
from crashsafe.store.core import SQLStore
from crashsafe.store.postgres_arrays import columns, element_types
from crashsafe.store.postgres_cursors import ClaimCursors
from crashsafe.store.postgres_urls import options_of
from crashsafe.store.postgres_urls import why as _why
from crashsafe.store.queries import load_migrations, load_queries, upgrade_said
from crashsafe.store.sql_base import Claimed, Params, StaleInGroup, Tx, fenced_by_count, first
from crashsafe.store.values import Lease, NewUrl, PageOutcome, Politeness

try:
    import psycopg
    from psycopg import errors as pg_errors
except ImportError:  # pragma: no cover - the optional extra
    psycopg = None  # type: ignore[assignment]

T = TypeVar("T")
logger = logging.getLogger("crashsafe.store")


class _QuietPipelineExit(logging.Filter):
    """psycopg warns "error ignored terminating <Pipeline>" when a pipeline ends on a
    connection that broke (a server restart): the error itself is raised as well, and
    the store reconnects and says so. The warning is the same fact again, as noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("error ignored terminating")


logging.getLogger("psycopg").addFilter(_QuietPipelineExit())
Q = load_queries("postgres")
MIGRATIONS = load_migrations("postgres")
RETRIES = 5  # runs of a call that a deadlock or serialisation failure rolled back
FENCE_FAILED = "CS409"  # crashsafe_fenced(): a fenced update of a group missed its row


def _body(sql: str) -> str:
    """``sql`` without its comments and its final semicolon, to nest in a WITH."""
    return "\n".join(line.split("--", 1)[0] for line in sql.splitlines()).strip().rstrip(";")


def _fenced_sql(sql: str) -> str:
    """A fenced update that checks its own count on the server (see crashsafe_fenced),
    and sets the grants' outcomes in the same statement (one statement less a commit).
    If the count is short the statement fails, and the outcomes with it."""
    return (
        f"WITH fenced AS ({_body(sql)} RETURNING 1), "
        f"outcomes AS ({_body(Q['set_grant_outcome'])}) "
        "SELECT crashsafe_fenced(count(*), %(expected)s) FROM fenced"
    )


FENCED = {name: _fenced_sql(Q[name]) for name in ("mark_done", "mark_retry", "mark_failed")}
TYPES = {name: element_types(sql) for name, sql in Q.items()}  # (of each query's arrays)
TYPES.update({name: element_types(sql) for name, sql in FENCED.items()})  # (and outcomes')


class _Unreachable(Exception):
    """The server cannot be reached again yet (while reconnecting)."""


def _claim_after(p: Params, cursors: dict[int, int]) -> tuple[str, Params]:
    """``claim_after`` with one ``claim_after_band`` per priority, and its parameters:
    it picks the URLs, ``CLAIM_PICKED`` grants them."""
    arms, q = [], dict(p)
    for n, band in enumerate(sorted(cursors, reverse=True)):
        arm = Q["claim_after_band"].replace("%(band)s", f"%(band{n})s")
        arms.append(f"band{n} AS ({arm.replace('%(after)s', f'%(after{n})s')})")
        q[f"band{n}"], q[f"after{n}"] = band, cursors[band]
    union = " UNION ALL ".join(f"SELECT id, priority FROM band{n}" for n in range(len(arms)))
    return Q["claim_after"].replace("/*bands*/", ",\n".join([*arms, f"fresh AS ({union})"])), q


#: claim_due's grant of the picked ids (lease_grants rows, the frontier rows leased):
#: claim_picked ends where it begins.
_GRANT = Q["claim_due"][Q["claim_due"].index("), granted AS (") + 1 :]
CLAIM_PICKED = f"{Q['claim_picked']}\n{_GRANT}"


class _Tx:
    """A transaction on the store's connection, running its named queries."""

    __slots__ = ("conn", "cur")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.cur = conn.cursor()

    def rows(self, name: str, params: Params) -> list[tuple[Any, ...]]:
        return self.rows_of(Q[name], params)

    def rows_of(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        self.cur.execute(sql, params)
        return self.cur.fetchall() if self.cur.description else []

    def run(self, name: str, params: Params) -> int:
        self.cur.execute(Q[name], params)
        return self.cur.rowcount

    def unprepared(self, sql: str, params: Params) -> None:
        """Run ``sql`` planned with these values (never a generic plan); in a pipeline,
        without waiting for it."""
        self.cur.execute(sql, params, prepare=False)

    def many(self, name: str, rows: Sequence[Params]) -> int:
        """One statement for all ``rows``: the query reads each parameter as an array of
        the rows' values (``unnest``). Row by row, a group commit of 16 pages took 4.4 ms
        (some 100 statements); as arrays, a handful."""
        if not rows:
            return 0
        self.cur.execute(Q[name], columns(rows, TYPES[name]))
        return self.cur.rowcount

    def fenced(self, name: str, rows: Sequence[Params]) -> None:
        fenced_by_count(self, name, rows)

    def savepoint(self) -> AbstractContextManager[Any]:
        return self.conn.transaction()  # nested: a savepoint, rolled back if it raises


class _GroupTx(_Tx):
    """A group commit's fast path in pipeline mode: its statements go out without waiting
    for one another, so the transaction takes two round trips (up to the claim's answer,
    then the commit) instead of one per statement, and never sits open waiting for a
    busy client. Counts are not read; the fenced updates check theirs on the server."""

    __slots__ = ()

    def many(self, name: str, rows: Sequence[Params]) -> int:
        if rows:
            self.cur.execute(Q[name], columns(rows, TYPES[name]))
        return 0  # not read: the fast path needs no count but the fenced ones'

    def fenced(self, name: str, rows: Sequence[Params]) -> None:
        self.cur.execute(FENCED[name], {**columns(rows, TYPES[name]), "expected": len(rows)})

    def rows_of(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        cur = self.conn.cursor()  # its own: the shared one's results are not waited for
        cur.execute(sql, params)
        return cur.fetchall()  # (waits for the results: its description comes with them)


def _rolled_back(exc: psycopg.Error) -> bool:
    """Whether the server rolled the transaction back for another's sake (SQLSTATE class
    40: a deadlock, a serialisation failure): it is void, and worth running again.
    (psycopg's DeadlockDetected is not a TransactionRollback: the class decides.)"""
    return (exc.sqlstate or "").startswith("40")


class PostgresStore(SQLStore):
    """The store for many workers. Open it with ``open_store("postgresql://...")``."""

    def __init__(
        self,
        url: str,
        *,
        create: bool = True,
        readonly: bool = False,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if psycopg is None:
            raise ConfigError(
                "the PostgreSQL store needs psycopg: pip install 'crashsafe[postgres]'"
            )
        self.url = url
        self._conninfo, self.schema, self._reconnect_for = options_of(url)
        # Two-key advisory locks: (this schema's key, worker id); (key, 0) for migrations.
        self._space = zlib.crc32(self.schema.encode()) & 0x7FFFFFFF
        self._clock = clock
        self._readonly = readonly
        self._given_up_at: float | None = None  # a call gave up reconnecting, lost since
        self._worker_id: int | None = None
        self._cursors = ClaimCursors(clock or time.monotonic)  # where this worker's claims resume
        self._conn = self._connect()
        try:
            if readonly:
                self._check_schema()
            elif create:  # (a current schema: no lock taken, no other opener waited for)
                with self._conn.transaction():
                    current = self._schema_version(self._conn.cursor())
                if current != MIGRATIONS[-1][0]:
                    self._migrate()
            elif self._check_schema(older=True) < MIGRATIONS[-1][0]:
                self._migrate()  # (without create, only a schema that is there: as SQLite)
        except psycopg.Error as exc:
            self._conn.close()
            why = _why(exc, readonly=readonly)
            raise StoreError(f"database {masked(self.url)}: {why}") from exc
        except BaseException:
            self._conn.close()
            raise

    # -- plumbing ------------------------------------------------------------------------
    def _connect(self) -> psycopg.Connection[Any]:
        try:
            given = psycopg.conninfo.conninfo_to_dict(self._conninfo)
        except psycopg.ProgrammingError:  # its message quotes the token: the password, say
            raise ConfigError(
                f"{masked(self.url)} does not parse as a PostgreSQL URL (psycopg's message is "
                "not shown: it would show a part of it, maybe the password); check the "
                "percent signs: a literal % is %25"
            ) from None
        # (array_nulls: the group statements' arrays say NULL for None; a server set
        # otherwise would read it as the text "NULL")
        options = [str(given.get("options") or ""), f"-c search_path={self.schema}",
                   "-c array_nulls=on"]  # fmt: skip
        if self._readonly:
            options.append("-c default_transaction_read_only=on")
        try:
            return psycopg.connect(
                self._conninfo,
                autocommit=True,  # transactions are explicit: conn.transaction()
                connect_timeout=given.get("connect_timeout") or 10,
                options=" ".join(o for o in options if o),
                application_name=given.get("application_name") or "crashsafe",
            )
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to {masked(self.url)}: {_why(exc)}") from exc

    def _migrate(self) -> None:
        latest = MIGRATIONS[-1][0]
        with self._conn.transaction():
            cur = self._conn.cursor()
            # One worker at a time: the others wait here, then find the schema current.
            cur.execute("SELECT pg_try_advisory_xact_lock(%s, 0)", (self._space,))
            if not first(cur.fetchall()):
                logger.info(
                    "waiting for another crashsafe process creating or upgrading %s",
                    self._where(),
                )
                cur.execute("SELECT pg_advisory_xact_lock(%s, 0)", (self._space,))
            cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{self.schema}"')
            current = self._schema_version(cur)
            if current is None:
                cur.execute("CREATE TABLE crashsafe_schema (version integer NOT NULL)")
                cur.execute("INSERT INTO crashsafe_schema VALUES (0)")
                current = 0
            if current > latest:
                raise self._too_new(current)
            with upgrade_said(self._where(), current, latest):
                for version, script in MIGRATIONS:
                    if version > current:
                        cur.execute(script)
                        cur.execute("UPDATE crashsafe_schema SET version = %s", (version,))

    def _where(self) -> str:
        """The store, as its log lines name it: the URL, and the schema if it does not."""
        url = masked(self.url)
        return url if "schema=" in url else f"{url} (schema {self.schema!r})"

    def _check_schema(self, *, older: bool = False) -> int:
        """The schema's version; refused if missing, too new, or (unless ``older``) older
        than this crashsafe's."""
        latest = MIGRATIONS[-1][0]
        with self._conn.transaction():
            current = self._schema_version(self._conn.cursor())
        if current is None:
            raise StoreError(
                f"{masked(self.url)} holds no crashsafe data (schema {self.schema!r}): check "
                "--db, or run `crashsafe crawl` on it first"
            )
        if current > latest:
            raise self._too_new(current)
        if current < latest and not older:
            raise SchemaError(
                f"{masked(self.url)} was written by an older crashsafe (schema version "
                f"{current}): run `crashsafe crawl` on it once with this version (it "
                "upgrades the schema), then read it"
            )
        return current

    def _schema_version(self, cur: psycopg.Cursor[Any]) -> int | None:
        cur.execute(
            "SELECT to_regclass(%s) IS NOT NULL, to_regclass(%s) IS NOT NULL",
            (f'"{self.schema}".crashsafe_schema', f'"{self.schema}".frontier'),
        )
        ours, frontier = cur.fetchone() or (False, False)
        if not ours:
            if frontier:
                raise SchemaError(
                    f"schema {self.schema!r} of {masked(self.url)} has a frontier table "
                    "that is not crashsafe's: choose another schema with ?schema=name"
                )
            return None
        cur.execute(f'SELECT version FROM "{self.schema}".crashsafe_schema')
        row = cur.fetchone()
        return int(row[0]) if row else 0

    def _too_new(self, version: int) -> SchemaError:
        return SchemaError(
            f"{masked(self.url)} has schema version {version}, this crashsafe knows up to "
            f"{MIGRATIONS[-1][0]}: upgrade crashsafe"
        )

    @contextmanager
    def _write(self) -> Iterator[_Tx]:
        # Any write but a page commit's may put URLs behind this worker's claim cursors (a
        # release, a retry queued, a requeue): its next claim looks from the start.
        self._cursors.invalidate()
        with self._conn.transaction():
            yield _Tx(self._conn)

    @contextmanager
    def _write_group(self) -> Iterator[_Tx]:
        try:
            with self._conn.pipeline(), self._conn.transaction():
                yield _GroupTx(self._conn)
        except psycopg.Error as exc:
            if exc.sqlstate == FENCE_FAILED:
                raise StaleInGroup from exc
            raise

    @contextmanager
    def _read(self) -> Iterator[_Tx]:
        with self._conn.transaction():
            tx = _Tx(self._conn)
            # One snapshot for every query of the block (stats read several tables).
            tx.cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield tx

    def _run(self, fn: Callable[[], T]) -> T:
        """Run ``fn``; on a lost connection reconnect with backoff and run it again, on a
        deadlock or serialisation failure run it again at once. Once a call has waited
        ``reconnect_seconds`` in vain, the next ones try one reconnection each and fail at
        once (the crawl is stopping; its queued calls must not wait that long again)."""
        lost_since: float | None = self._given_up_at
        rolled_back = 0
        backoff = 0.1
        while True:
            try:
                if lost_since is not None:
                    self._reconnect()
                    logger.warning("reconnected to %s", masked(self.url))
                    lost_since = self._given_up_at = None
                try:
                    result = fn()
                except BaseException:
                    self._cursors.rolled_back()  # (a claim of a void transaction granted nothing)
                    raise
                self._cursors.committed()  # what its claims granted moves the cursors
                return result
            except psycopg.Error as exc:
                if _rolled_back(exc) and rolled_back < RETRIES:
                    rolled_back += 1  # another worker's transaction won: ours is void
                    continue
                if lost_since is None and not self._connection_lost():
                    why = _why(exc, readonly=self._readonly)
                    raise StoreError(f"database {masked(self.url)}: {why}") from exc
                why = _why(exc, readonly=self._readonly)
            except _Unreachable as exc:  # reconnecting failed: the server is not back yet
                why = str(exc)
            now = time.monotonic()
            if lost_since is None:
                lost_since = now
                logger.warning(
                    "lost the connection to %s (%s); reconnecting", masked(self.url), why
                )
            if now - lost_since >= self._reconnect_for:
                self._given_up_at = lost_since
                raise StoreError(
                    f"database {masked(self.url)}: no connection for "
                    f"{self._reconnect_for:.0f} s ({why}); run the same command again once "
                    "the server is back"
                )
            time.sleep(backoff)
            backoff = min(backoff * 2, 5.0)

    def _connection_lost(self) -> bool:
        return bool(self._conn.closed or self._conn.broken)

    def _reconnect(self) -> None:
        """A new connection; a registered worker takes its liveness lock again (its
        leases may have been taken back meanwhile: their commits will be refused)."""
        if not self._conn.closed:
            self._conn.close()
        try:
            self._conn = self._connect()
        except StoreError as exc:
            raise _Unreachable(_why(exc.__cause__ or exc)) from exc
        if self._worker_id is not None:
            with self._write() as tx:
                tx.rows("lock_worker", {"space": self._space, "id": self._worker_id})

    def _page_fault(self, exc: Exception) -> bool:
        # A lost connection, a deadlock: the whole call runs again (``_run``).
        return not isinstance(exc, psycopg.OperationalError) and not self._connection_lost()

    def _now(self) -> float | None:
        return None if self._clock is None else self._clock()

    def close(self) -> None:
        if not self._conn.closed:
            self.unregister_worker()
        self._conn.close()

    def compact(self) -> tuple[int, int]:
        """VACUUM (ANALYZE) every table of the schema: dead rows' space becomes reusable
        (files do not shrink; autovacuum does the same on its own schedule). Returns the
        tables' bytes before and after."""
        from psycopg import sql

        def size() -> int:
            with self._read() as tx:
                return int(tx.rows("store_bytes", {})[0][0])

        def go() -> tuple[int, int]:
            before = size()
            with self._read() as tx:
                tables = [name for (name,) in tx.rows("store_tables", {})]
            for table in tables:  # (autocommit: VACUUM runs outside a transaction)
                self._conn.execute(
                    sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(self.schema, table))
                )
            return before, size()

        return self._run(go)

    # -- planner statistics --------------------------------------------------------------
    # A claim walks the pending index in order only if the planner knows the frontier is
    # large: with the statistics of the empty table it was created as (autovacuum looks
    # once a minute), it sorted every pending row instead, 0.5 s per claim at 240 000.
    # So the store analyzes the frontier itself when a worker starts, and whenever the
    # links it added pass the size the statistics know of.
    # The tables a page commit writes likewise: psycopg prepares a statement run five
    # times, and PostgreSQL keeps a generic plan of it, made with the statistics of the
    # time, until they change. A grant's outcome, set by id while lease_grants was new,
    # was planned as a scan of the whole table and kept so: 4 ms a commit of 16 pages
    # soon after (4 workers, a server without autovacuum). Analyzed again each time this
    # store has committed twice as many pages, the plans are made afresh while it grows.
    _links_added = 0
    _analyzed_at = 0
    _pages_committed = 0
    _pages_analyzed_at = 1000
    _COMMITTED_TABLES = ("lease_grants", "records", "record_pages")

    def _note_growth(self, links: int, pages: int) -> None:
        self._links_added += links
        if self._links_added > max(1000, 2 * self._analyzed_at):
            self._analyze()
        self._pages_committed += pages
        if self._pages_committed >= self._pages_analyzed_at:
            self._pages_analyzed_at = 2 * self._pages_committed
            self._analyze(self._COMMITTED_TABLES)

    def _analyze(self, tables: Sequence[str] = ("frontier",)) -> None:
        try:
            with self._conn.transaction():
                cur = self._conn.cursor()
                # Not behind a VACUUM (crashsafe vacuum) or another worker's ANALYZE of the
                # same table: the page commits of this worker would wait for it.
                cur.execute("SET LOCAL lock_timeout = '100ms'")
                cur.execute(f"ANALYZE {', '.join(tables)}")
                if "frontier" in tables:
                    cur.execute(
                        "SELECT reltuples::bigint FROM pg_class WHERE oid = 'frontier'::regclass"
                    )
                    row = cur.fetchone()
                    self._analyzed_at = max(int(row[0]) if row else 0, 0)
                    self._links_added = 0
        except pg_errors.InsufficientPrivilege:  # not the tables' owner: autovacuum does it
            self._links_added = -(10**12)
            self._pages_analyzed_at = 10**18
        except psycopg.Error:  # (a lock, the connection): try again after as many links
            self._links_added = 0

    def register_worker(self, crawl: str = "", *, pid: int | None = None, run: str = "") -> str:
        owner = super().register_worker(crawl, pid=pid, run=run)
        if not self._readonly and self._analyzed_at == 0:
            self._analyze()
        return owner

    def enqueue(self, crawl: str, urls: Iterable[NewUrl]) -> int:
        urls = list(urls)
        added = super().enqueue(crawl, urls)
        self._note_growth(added, 0)
        return added

    def commit_and_lease(
        self,
        crawl: str,
        outcomes: Sequence[PageOutcome],
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
        politeness: Politeness | None = None,
    ) -> tuple[list[str | None], list[Lease]]:
        if any(p.kind in ("retry", "deferred") for p in outcomes):
            self._cursors.invalidate()  # (URLs pending again, behind the cursors)
        result = super().commit_and_lease(
            crawl, outcomes, owner=owner, limit=limit, lease_seconds=lease_seconds,
            politeness=politeness,
        )  # fmt: skip
        self._cursors.learned(crawl, {u.priority for p in outcomes for u in p.links})
        self._note_growth(sum(len(p.links) for p in outcomes), len(outcomes))
        return result

    # -- claims ----------------------------------------------------------------------------
    def _claim_due(self, tx: Tx, p: Params) -> list[Claimed]:
        """The plain claim, or one from this worker's cursors (``postgres_cursors.py``),
        topped up by the plain one when it comes up short."""
        crawl = p["crawl"]
        rows: list[Claimed] = []
        cursors = self._cursors.usable(crawl)
        if cursors is not None:
            assert isinstance(tx, _Tx)
            started = self._cursors.now()
            tx.unprepared(*_claim_after(p, cursors))
            rows = tx.rows_of(CLAIM_PICKED, p)
            self._cursors.claimed_from_cursors(self._cursors.now() - started)
            self._cursors.granted(crawl, rows, plain=False)
            if len(rows) >= p["limit"]:
                return rows
            p = {**p, "limit": p["limit"] - len(rows)}
        started = self._cursors.now()  # (the store's clock: an injected one stands still)
        more = tx.rows("claim_due", p)
        self._cursors.rescanned(crawl, self._cursors.now() - started)
        self._cursors.granted(crawl, more, plain=True)
        return rows + more

    def _claim_ids(self, tx: Tx, p: Params, ids: list[int]) -> list[Claimed]:
        return tx.rows("claim_ids", {**p, "ids": ids})

    # -- liveness: session advisory locks --------------------------------------------------
    def _take_liveness(self, owner: str, tx: Tx) -> None:
        [(worker_id,)] = tx.rows("worker_id", {"owner": owner})
        tx.rows("lock_worker", {"space": self._space, "id": worker_id})
        self._worker_id = worker_id

    def _drop_liveness(self, owner: str) -> None:
        worker_id, self._worker_id = self._worker_id, None
        if worker_id is not None and not self._connection_lost():
            try:
                with self._write() as tx:
                    tx.rows("unlock_worker", {"space": self._space, "id": worker_id})
            except psycopg.Error:
                pass  # the lock dies with the connection anyway

    def _alive(self, tx: Tx, owners: Sequence[str]) -> set[str]:
        found = tx.rows("live_owners", {"space": self._space, "owners": list(owners)})
        return {row[0] for row in found}

    def _fold(self, tx: Tx, ids: list[int]) -> int:
        return int(first(tx.rows("fold_grants", {"ids": ids})))
