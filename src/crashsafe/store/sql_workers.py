"""Workers of an SQL store: registration, liveness, taking a dead worker's leases back."""

from __future__ import annotations

import os
import socket

from crashsafe.store.liveness import new_owner_id
from crashsafe.store.sql_base import SQLBase, Tx
from crashsafe.store.values import Backoff, WorkerInfo

RECLAIM_PAUSE = 2.0  # seconds at least before a dead worker's URL, tried before, is due


class SQLWorkers(SQLBase):
    """Who is crawling: a row per worker, its liveness lock (the backend's), and the
    leases of dead ones put back."""

    # -- workers -------------------------------------------------------------------------
    def register_worker(self, crawl: str = "", *, pid: int | None = None, run: str = "") -> str:
        if self._owner is not None:
            return self._owner
        owner = new_owner_id(run)
        host = socket.gethostname().split(".")[0] or "host"

        def go() -> None:
            with self._write() as tx:
                self._forget_dead_workers(tx, crawl)
                tx.run(
                    "add_worker",
                    {"owner": owner, "crawl": crawl, "host": host, "pid": pid or os.getpid(),
                     "now": self._now()},
                )  # fmt: skip
                self._take_liveness(owner, tx)

        self._run(go)
        self._owner = owner
        return owner

    def _forget_dead_workers(self, tx: Tx, crawl: str) -> None:
        """Drop the rows of this crawl's dead workers that hold no lease (their pages
        stay counted in the lease history)."""
        idle = [r[0] for r in tx.rows("idle_workers", {"crawl": crawl})]
        if idle:
            alive = self._alive(tx, idle)
            tx.many("forget_worker", [{"owner": o} for o in idle if o not in alive])

    def unregister_worker(self) -> None:
        if self._owner is not None:
            owner, self._owner = self._owner, None
            self._drop_liveness(owner)

    def touch_worker(self, owner: str) -> None:
        """Note that worker ``owner`` is at work now (its ``last_seen``)."""

        def go() -> None:
            with self._write() as tx:
                tx.run("touch_worker", {"owner": owner, "now": self._now()})

        self._run(go)

    def reclaim_dead_workers(self, crawl: str, *, backoff: Backoff | None = None) -> int:
        b = backoff or Backoff(0.0, 0.0)

        def go() -> int:
            with self._read() as tx:
                owners = [r[0] for r in tx.rows("lease_owners", {"crawl": crawl})]
                alive = self._alive(tx, owners) if owners else set()
            dead = [o for o in owners if o not in alive]
            if not dead:
                return 0
            with self._write() as tx:
                rows = [{"crawl": crawl, "owner": o, "now": self._now(), "base": b.base,
                         "cap": b.cap, "pause": RECLAIM_PAUSE if backoff else 0.0}
                        for o in dead]  # fmt: skip
                return tx.many("release_owner", rows)

        return self._run(go)

    def workers(self, crawl: str | None = None) -> list[WorkerInfo]:
        def go() -> list[WorkerInfo]:
            with self._read() as tx:
                p = {"crawl": crawl, "now": self._now()}
                rows = tx.rows("list_workers", p)
                held = dict(tx.rows("leases_by_owner", p))
                pages = dict(tx.rows("pages_by_owner", p))
                alive = self._alive(tx, [r[0] for r in rows]) if rows else set()
            found = [
                WorkerInfo(o, c, h, pid, started, o in alive, held.get(o, 0), pages.get(o, 0), seen)
                for o, c, h, pid, started, seen in rows
            ]
            return [w for w in found if w.alive or w.leases]

        return self._run(go)
