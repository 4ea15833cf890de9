"""Steering running crawls from outside: pause and resume a crawl or one origin of it,
ask its workers to stop (cancel), and the audit trail of who did what, when.

The claim enforces a pause, not the workers: every claim reads the crawl's one
``controls`` row in its transaction (``claim_gate``), so once ``pause`` has committed no
worker, of any version or on any machine, is granted a URL of the crawl; what was leased
before finishes and commits. A paused origin's pending URLs are moved out of the due set
(``next_attempt_at`` shifted ``PAUSE_SHIFT`` ahead, their own backoffs kept) and moved
back on resume; URLs of it that become due meanwhile (new links, retries, a dead
worker's) are moved out by the claim that meets them. A cancel marks the crawl's
registered workers; each looks at its row every second (``crawl/upkeep.py``) and ends
its run as after Ctrl-C. Every action is written with its audit row in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from crashsafe.store.control_values import (
    PAUSE_SHIFT,
    PAUSE_SHIFTED,
    AuditEntry,
    Control,
    PausedOrigin,
)
from crashsafe.store.hosts import origin_of
from crashsafe.store.sql_base import Params, SQLBase, Tx


class SQLControl(SQLBase):
    """Pause, resume, cancel and the audit trail of an SQL store (module docstring)."""

    # -- what claims ask -------------------------------------------------------------------
    def _claim_gate(self, tx: Tx, crawl: str) -> tuple[bool, bool]:
        """(the crawl is paused, an origin of it is), read in the claim's transaction."""
        rows = tx.rows("claim_gate", {"crawl": crawl})
        if not rows:
            return False, False
        paused, origins = rows[0]
        return bool(paused), bool(origins)

    def _paused_origins(self, tx: Tx, crawl: str) -> set[str]:
        return {o for o, _, _ in tx.rows("paused_hosts", {"crawl": crawl})}

    def _shift_out(self, tx: Tx, ids: Sequence[int]) -> None:
        """Move URLs of paused origins that a claim met out of the due set: pending ones,
        and lapsed leases (given back first: else a hung worker's leases of a paused
        origin would fill every scan, and the rest of the crawl would never be reached)."""
        if ids:
            p = {"ids": list(ids), "shift": PAUSE_SHIFT, "shifted": PAUSE_SHIFTED,
                 "now": self._now()}  # fmt: skip
            tx.run("shift_ids_out", p)
            tx.run("release_lapsed_out", p)

    # -- actions ---------------------------------------------------------------------------
    def pause(self, crawl: str, *, actor: str, origin: str | None = None) -> bool:
        """Pause ``crawl`` (or only ``origin`` of it, ``scheme://host[:port]``); False if
        it was paused already."""
        return self._set_paused(crawl, actor=actor, origin=origin, paused=True)

    def resume(self, crawl: str, *, actor: str, origin: str | None = None) -> bool:
        """Resume ``crawl`` (or ``origin`` of it); False if it was not paused."""
        return self._set_paused(crawl, actor=actor, origin=origin, paused=False)

    def _set_paused(self, crawl: str, *, actor: str, origin: str | None, paused: bool) -> bool:
        now = self._now()
        p: dict[str, object] = {"crawl": crawl, "actor": actor, "now": now}

        def go() -> bool:
            with self._write() as tx:
                tx.rows("lock_control", p)  # (PostgreSQL: waits for the claims under way)
                tx.run("add_control", p)
                if origin is None:
                    changed = tx.run("pause_crawl" if paused else "resume_crawl", p) > 0
                else:
                    changed = self._set_origin_paused(tx, {**p, "origin": origin}, paused)
                if changed:
                    self._audit(tx, crawl, "pause" if paused else "resume", origin, actor)
                return changed

        return self._run(go)

    def _set_origin_paused(self, tx: Tx, p: Params, paused: bool) -> bool:
        origin = str(p["origin"])
        tx.many("add_host", [{"crawl": p["crawl"], "origin": origin}])
        changed = tx.run("pause_host" if paused else "resume_host", p) > 0
        if changed:
            shift = {"crawl": p["crawl"], "origin": origin, "low": origin + "/",
                     "high": origin + "0", "shift": PAUSE_SHIFT,
                     "shifted": PAUSE_SHIFTED}  # fmt: skip
            tx.run("shift_origin_out" if paused else "shift_origin_back", shift)
            tx.run("count_paused_hosts", p)
        return changed

    def knows_origin(self, crawl: str, origin: str) -> bool:
        """Whether ``crawl`` has a URL of ``origin`` (a pause of one it has not is kept,
        but is likely a typo)."""

        def go() -> bool:
            with self._read() as tx:
                p = {"crawl": crawl, "origin": origin, "low": origin + "/", "high": origin + "0"}
                return bool(tx.rows("knows_origin", p)[0][0])

        return self._run(go)

    def cancel(self, crawl: str, *, actor: str) -> int:
        """Ask every registered worker of ``crawl`` to end its run; how many were asked."""

        def go() -> int:
            with self._write() as tx:
                p = {"crawl": crawl, "actor": actor, "now": self._now()}
                owners = [o for (o,) in tx.rows("ask_workers_to_stop", p)]
                alive = self._alive(tx, owners) if owners else set()
                self._audit(tx, crawl, "cancel", None, actor, f"{len(alive)} worker(s)")
                return len(alive)

        return self._run(go)

    def control(self, crawl: str, owner: str | None = None) -> Control:
        """How ``crawl`` is steered now; with ``owner``, whether that worker was asked to
        stop."""

        def go() -> Control:
            with self._read() as tx:
                rows = tx.rows("control_of", {"crawl": crawl})
                origins = tx.rows("paused_hosts", {"crawl": crawl}) if rows and rows[0][2] else []
                stop = tx.rows("stop_asked", {"owner": owner}) if owner else []
            since, by = (rows[0][0], rows[0][1]) if rows else (None, None)
            return Control(
                crawl,
                paused_since=since,
                paused_by=by,
                origins=tuple(PausedOrigin(o, t, b) for o, t, b in origins),
                stop_asked_by=stop[0][1] if stop and stop[0][0] is not None else None,
            )

        return self._run(go)

    def audit(self, crawl: str | None = None, *, limit: int = 100) -> list[AuditEntry]:
        """The latest actions taken on ``crawl`` (all crawls: None), newest first."""

        def go() -> list[AuditEntry]:
            with self._read() as tx:
                rows = tx.rows("list_audit", {"crawl": crawl, "limit": limit})
            return [AuditEntry(*row) for row in rows]

        return self._run(go)

    def _audit(
        self,
        tx: Tx,
        crawl: str,
        action: str,
        target: str | None,
        actor: str,
        detail: str | None = None,
    ) -> None:
        row = {"crawl": crawl, "action": action, "target": target, "actor": actor,
               "now": self._now(), "detail": detail}  # fmt: skip
        tx.run("add_audit", row)


def split_paused(
    candidates: Sequence[tuple[int, str]], paused: set[str]
) -> tuple[list[tuple[int, str]], list[int]]:
    """The candidates of a claim whose origins are not paused, and the ids of those that
    are (to be moved out of the due set)."""
    keep: list[tuple[int, str]] = []
    out: list[int] = []
    for fid, url in candidates:
        if origin_of(url) in paused:
            out.append(fid)
        else:
            keep.append((fid, url))
    return keep, out
