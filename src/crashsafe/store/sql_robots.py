"""robots.txt and Crawl-delays in an SQL store: the cache every worker shares."""

from __future__ import annotations

import time
from typing import Any

from crashsafe.store.sql_base import SQLBase, Tx, first
from crashsafe.store.values import RobotsEntry, Waiting, storable

HOST_DELAYS_EVERY = 5.0  # seconds between looks for robots.txt Crawl-delays of a crawl


class SQLRobots(SQLBase):
    """robots.txt per origin (the last copy, the failure state, the one-fetcher claim)
    and the Crawl-delays that claims honour for all workers."""

    _delays: dict[str, tuple[float, bool]] | None = None  # crawl: (looked at, any delay)

    def _delays_seen(self) -> dict[str, tuple[float, bool]]:
        if self._delays is None:
            self._delays = {}
        return self._delays

    # -- robots.txt cache ----------------------------------------------------------------
    def get_robots(self, crawl: str, origin: str) -> RobotsEntry | None:
        def go() -> RobotsEntry | None:
            with self._read() as tx:
                p = {"crawl": crawl, "origin": origin, "now": self._now()}
                row = tx.rows("get_robots", p)
            if not row:
                return None
            body, age, failing_for, failures, retry_in, claimed_for = row[0]
            return RobotsEntry(body, age, failing_for, failures, retry_in, claimed_for)

        return self._run(go)

    def claim_robots(self, crawl: str, origin: str, owner: str, seconds: float) -> bool:
        def go() -> bool:
            with self._write() as tx:
                p = {"crawl": crawl, "origin": origin, "owner": owner, "seconds": seconds,
                     "now": self._now()}  # fmt: skip
                tx.run("add_robots", p)
                if tx.run("claim_robots", p) == 1:
                    return True
                # Held: by a live worker, or by one that died fetching (its liveness lock
                # is free), whose claim is taken over at once instead of when it lapses.
                holder = first(tx.rows("robots_claim_owner", p))
                if holder is None or self._alive(tx, [holder]):
                    return False
                return tx.run("take_robots_claim", {**p, "dead": holder}) == 1

        return self._run(go)

    def put_robots(self, crawl: str, origin: str, body: str, *, owner: str, age: float) -> bool:
        p = {"body": storable(body), "age": age, "crawl": crawl, "origin": origin,
             "owner": owner}  # fmt: skip
        return self._fenced_robots("put_robots", p)

    def robots_failed(
        self, crawl: str, origin: str, retry_in: float, *, owner: str, why: str = ""
    ) -> bool:
        p = {"retry_in": retry_in, "crawl": crawl, "origin": origin, "owner": owner,
             "why": storable(why)[:500] or None}  # fmt: skip
        return self._fenced_robots("robots_failed", p)

    def waiting(self, crawl: str) -> list[Waiting]:
        def go() -> list[Waiting]:
            with self._read() as tx:
                rows = tx.rows("list_waiting", {"crawl": crawl})
            return [Waiting(o, int(n), why or "", since, retry) for o, why, since, retry, n in rows]

        return self._run(go)

    def fetchable(self, crawl: str) -> bool:
        def go() -> bool:
            with self._read() as tx:
                return bool(first(tx.rows("fetchable", {"crawl": crawl})))

        return self._run(go)

    def release_robots(self, crawl: str, origin: str, owner: str) -> None:
        self._fenced_robots("release_robots", {"crawl": crawl, "origin": origin, "owner": owner})

    def _fenced_robots(self, name: str, p: dict[str, Any]) -> bool:
        def go() -> bool:
            with self._write() as tx:
                return tx.run(name, {**p, "now": self._now()}) == 1

        return self._run(go)

    def set_host_delay(self, crawl: str, origin: str, seconds: float) -> None:
        def go() -> None:
            with self._write() as tx:
                p = {"crawl": crawl, "origin": origin, "delay": seconds}
                tx.many("add_host", [{"crawl": crawl, "origin": origin}])
                tx.run("set_host_delay", p)

        self._run(go)
        if seconds > 0:
            self._delays_seen()[crawl] = (time.monotonic(), True)

    def _host_delays(self, tx: Tx, crawl: str) -> bool:
        """Whether an origin of ``crawl`` has a robots.txt Crawl-delay (then every claim
        honours politeness). Looked up every few seconds, not at every claim: another
        worker's new Crawl-delay reaches this one's claims that much later."""
        seen = self._delays_seen()
        known = seen.get(crawl)
        now = time.monotonic()
        if known is None or (not known[1] and now - known[0] > HOST_DELAYS_EVERY):
            known = seen[crawl] = (now, bool(tx.rows("any_host_delay", {"crawl": crawl})))
        return bool(known[1])
