"""The robots.txt table of the SQLite store (a part of :class:`SQLiteStore`)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TypeVar

from crashsafe.store.base import RobotsEntry, storable
from crashsafe.store.liveness import LockDir
from crashsafe.store.queries import load_queries

T = TypeVar("T")
Q = load_queries("sqlite")


class SQLiteRobots:
    """robots.txt per origin: the last copy read, the failure state, the fetch claim."""

    _db: sqlite3.Connection
    _locks: LockDir

    def _write(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _run(self, fn: Callable[[], T]) -> T:
        raise NotImplementedError

    # -- robots.txt cache ----------------------------------------------------------------
    def get_robots(self, crawl: str, origin: str) -> RobotsEntry | None:
        def go() -> RobotsEntry | None:
            row = self._db.execute(Q["get_robots"], (crawl, origin)).fetchone()
            if row is None:
                return None
            body, fetched_at, failing_since, failures, retry_at, owner, until = row
            claimed = until if owner is not None and until is not None else None
            return RobotsEntry(body, fetched_at, failing_since, failures, retry_at, claimed)

        return self._run(go)

    def claim_robots(self, crawl: str, origin: str, owner: str, seconds: float) -> bool:
        def go() -> bool:
            with self._write() as db:
                now = time.time()
                db.execute(Q["add_robots"], (crawl, origin))
                params = {
                    "owner": owner,
                    "until": now + seconds,
                    "crawl": crawl,
                    "origin": origin,
                    "now": now,
                }
                if db.execute(Q["claim_robots"], params).rowcount == 1:
                    return True
                # Held: by a live worker, or by one that died fetching (its liveness lock
                # is free), whose claim is taken over at once instead of when it lapses.
                holder = db.execute(Q["robots_claim_owner"], (crawl, origin)).fetchone()
                if holder is None or holder[0] is None or self._locks.is_alive(holder[0]):
                    return False
                params["dead"] = holder[0]
                return db.execute(Q["take_robots_claim"], params).rowcount == 1

        return self._run(go)

    def put_robots(
        self, crawl: str, origin: str, body: str, *, owner: str, fetched_at: float
    ) -> bool:
        params = {
            "body": storable(body),
            "fetched_at": fetched_at,
            "crawl": crawl,
            "origin": origin,
            "owner": owner,
        }

        def go() -> bool:
            with self._write() as db:
                return db.execute(Q["put_robots"], params).rowcount == 1

        return self._run(go)

    def robots_failed(self, crawl: str, origin: str, retry_at: float, *, owner: str) -> bool:
        def go() -> bool:
            with self._write() as db:
                params = {
                    "now": time.time(),
                    "retry_at": retry_at,
                    "crawl": crawl,
                    "origin": origin,
                    "owner": owner,
                }
                return db.execute(Q["robots_failed"], params).rowcount == 1

        return self._run(go)

    def release_robots(self, crawl: str, origin: str, owner: str) -> None:
        def go() -> None:
            with self._write() as db:
                params = {"crawl": crawl, "origin": origin, "owner": owner}
                db.execute(Q["release_robots"], params)

        self._run(go)
