"""Recrawls and the outbox of an SQL store: passes, effect figures, webhook deliveries.

The outbox itself is written by triggers (``sql/<dialect>/0005``/``0003``): a record's
new version and its event commit together, in the page's transaction, and every event is
fanned out to a ``deliveries`` row per endpoint of its crawl in that same transaction.
What is here leases those deliveries to dispatchers as the frontier leases URLs: a lease
that lapses (a killed dispatcher) is due again and counts an attempt; an answer is
stored only by the lease that is still current, but for "delivered", which is true
whoever says it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from crashsafe.store.effect_values import (
    Delivery,
    DeliveryResult,
    EffectStats,
    Endpoint,
    FailedDelivery,
    HighWater,
    RunFigures,
)
from crashsafe.store.sql_base import SQLBase, first
from crashsafe.store.values import storable


class SQLEffects(SQLBase):
    """Passes, effect figures and deliveries over the named queries."""

    # -- recrawls (begun in store/sql_passes.py) -----------------------------------------
    def last_pass_at(self, crawl: str) -> float | None:
        """When the crawl's last recrawl began (None: it has had none)."""

        def go() -> float | None:
            with self._read() as tx:
                found = first(tx.rows("last_pass_at", {"crawl": crawl}))
            return None if found is None else float(found)

        return self._run(go)

    def effect_stats(self, crawl: str) -> EffectStats:
        def go() -> EffectStats:
            p = {"crawl": crawl}
            with self._read() as tx:  # one snapshot
                (passes, last_at, versions, changed, gone, changed_last, files, size,
                 events) = tx.rows("effect_counts", p)[0]  # fmt: skip
                deliveries = dict(tx.rows("count_deliveries", p))
                retired = int(first(tx.rows("count_retired", p)))
            return EffectStats(
                crawl, int(passes), last_at, int(versions), int(changed), int(gone),
                int(changed_last), int(files), int(size), int(events), deliveries, retired,
            )  # fmt: skip

        return self._run(go)

    def finished_per_minute(self, crawl: str, since: float) -> list[tuple[int, int]]:
        """``(minute after since, pages finished in it)`` for the minutes since ``since``
        (seconds since the epoch) in which any page of ``crawl`` was done or failed."""

        def go() -> list[tuple[int, int]]:
            with self._read() as tx:
                rows = tx.rows("finished_per_minute", {"crawl": crawl, "since": since})
            return [(int(minute), int(n)) for minute, n in rows]

        return self._run(go)

    def deliveries_by_endpoint(self, crawl: str) -> dict[str, dict[str, int]]:
        """Each webhook endpoint of ``crawl`` (its URL) and its deliveries by state."""

        def go() -> dict[str, dict[str, int]]:
            found: dict[str, dict[str, int]] = {}
            with self._read() as tx:
                for url, state, n in tx.rows("deliveries_by_endpoint", {"crawl": crawl}):
                    found.setdefault(url, {})[state] = int(n)
            return found

        return self._run(go)

    def high_water(self, run: str = "") -> HighWater:
        """Where lease grants stand now and the time: cheap (an index lookup), for
        :meth:`since` to count the run ``run``'s own work at its end."""

        def go() -> HighWater:
            with self._read() as tx:
                grants, at = tx.rows("high_water", {"now": self._now()})[0]
            return HighWater(int(grants), float(at), run)

        return self._run(go)

    def since(self, crawl: str, mark: HighWater) -> RunFigures:
        """What the run of ``mark`` did for ``crawl``: the requests its workers made
        (their grants after the mark), and the records the pages they committed since
        created, changed or left gone (a range of the records changed since, joined to
        those pages)."""

        def go() -> RunFigures:
            prefix = f"{mark.run}." if mark.run else ""
            p = {"crawl": crawl, "grants": mark.grants, "at": mark.at, "prefix": prefix,
                 "n": len(prefix)}  # fmt: skip
            with self._read() as tx:
                requests = first(tx.rows("requests_after", p))
                [(created, updated, gone)] = tx.rows("records_after", p)
            kinds = {"record.created": created, "record.updated": updated, "record.gone": gone}
            return RunFigures(int(requests), {k: int(v) for k, v in kinds.items() if v})

        return self._run(go)

    # -- endpoints and deliveries ------------------------------------------------------
    def endpoint(self, crawl: str, url: str) -> Endpoint:
        """The endpoint ``url`` of ``crawl``, added with the crawl's whole outbox as its
        backlog the first time."""

        def go() -> Endpoint:
            p = {"crawl": crawl, "url": url, "now": self._now()}
            with self._write() as tx:
                found = tx.rows("find_endpoint", p)
                if not found:
                    tx.rows("lock_outbox", {})
                    found = tx.rows("find_endpoint", p)  # (added meanwhile by another)
                if found:
                    [(id_, disabled_at, why)] = found
                    return Endpoint(int(id_), crawl, url, disabled_at, why)
                # (events are written only while a crawl has an endpoint: the missing
                # ones first, before the fan-out to an endpoint can happen)
                tx.run("write_missing_events", p)
                id_ = first(tx.rows("add_endpoint", p))
                tx.run("add_backlog", {"endpoint": id_, "crawl": crawl})
                return Endpoint(int(id_), crawl, url, None, None)

        return self._run(go)

    def find_endpoint(self, crawl: str, url: str) -> Endpoint | None:
        """The endpoint ``url`` of ``crawl`` if it exists (never adds it)."""

        def go() -> Endpoint | None:
            with self._read() as tx:
                found = tx.rows("find_endpoint", {"crawl": crawl, "url": url})
            if not found:
                return None
            [(id_, disabled_at, why)] = found
            return Endpoint(int(id_), crawl, url, disabled_at, why)

        return self._run(go)

    def lease_deliveries(
        self, endpoint: int, owner: str, limit: int, lease_seconds: float
    ) -> list[Delivery]:
        """Up to ``limit`` deliveries due to ``endpoint`` (none while it is disabled)."""
        if limit <= 0:
            return []

        def go() -> list[Delivery]:
            p = {"endpoint": endpoint, "owner": owner, "limit": limit,
                 "lease_seconds": lease_seconds, "now": self._now()}  # fmt: skip
            with self._write() as tx:
                leased = {event: (n, lease) for event, n, lease in tx.rows("lease_deliveries", p)}
                if not leased:
                    return []
                events = tx.rows("get_events", {"ids": sorted(leased)})
            return sorted(
                (Delivery(endpoint, int(id_), int(leased[id_][0]), crawl, record_id,
                          int(version), type_, url, data, float(at), int(leased[id_][1]))
                 for id_, crawl, record_id, version, type_, url, data, at in events),
                key=lambda d: d.event,
            )  # fmt: skip

        return self._run(go)

    def finish_deliveries(
        self, owner: str, results: Sequence[DeliveryResult], *, disable: str | None = None
    ) -> None:
        """Store the answers; a retry or failure is dropped if the lease is no longer
        ``owner``'s current one (it lapsed and was granted again). ``disable``: disable
        the endpoint, for that reason, in the same transaction (it answered 410), so no
        other dispatcher leases its deliveries in between."""
        if not results:
            return
        now = self._now()
        rows: dict[str, list[dict[str, Any]]] = {"delivered": [], "retry": [], "failed": []}
        for r in results:
            d = r.delivery
            row: dict[str, Any] = {"endpoint": d.endpoint, "event": d.event,
                                   "status": r.status, "now": now}  # fmt: skip
            if r.kind != "delivered":
                row |= {"error": storable(r.error or ""), "owner": owner,
                        "lease": d.lease}  # fmt: skip
            if r.kind == "retry":
                row["retry_in"] = r.retry_in
            rows[r.kind].append(row)

        def go() -> None:
            with self._write() as tx:
                for kind, name in (("delivered", "delivered"), ("retry", "delivery_retry"),
                                   ("failed", "delivery_failed")):  # fmt: skip
                    if rows[kind]:
                        tx.many(name, rows[kind])
                if disable is not None:
                    tx.run("disable_endpoint", {"endpoint": results[0].delivery.endpoint,
                                                "why": storable(disable), "now": now})  # fmt: skip

        self._run(go)

    def disable_endpoint(self, endpoint: int, why: str) -> None:
        def go() -> None:
            with self._write() as tx:
                p = {"endpoint": endpoint, "why": storable(why), "now": self._now()}
                tx.run("disable_endpoint", p)

        self._run(go)

    def deliveries_due(self, endpoint: int) -> float | None:
        """Seconds until a delivery to ``endpoint`` is due (0: now; None: none open)."""

        def go() -> float | None:
            with self._read() as tx:
                pending, leased = tx.rows(
                    "deliveries_due_in", {"endpoint": endpoint, "now": self._now()}
                )[0]
            times = [float(t) for t in (pending, leased) if t is not None]
            return max(0.0, min(times)) if times else None

        return self._run(go)

    def endpoint_deliveries(self, endpoint: int) -> dict[str, int]:
        """The deliveries of ``endpoint`` by state."""

        def go() -> dict[str, int]:
            with self._read() as tx:
                return dict(tx.rows("count_endpoint_deliveries", {"endpoint": endpoint}))

        return self._run(go)

    def remove_endpoint(self, crawl: str, url: str) -> int:
        """Forget the endpoint ``url`` of ``crawl`` and its deliveries; return how many
        deliveries went with it (-1: there is no such endpoint)."""

        def go() -> int:
            p = {"crawl": crawl, "url": url}
            with self._write() as tx:
                tx.rows("lock_outbox", {})  # no page commit fans out to it meanwhile
                n = tx.run("remove_deliveries", p)
                return n if tx.run("remove_endpoint", p) else -1

        return self._run(go)

    def failed_deliveries(self, crawl: str, url: str | None = None) -> list[FailedDelivery]:
        def go() -> list[FailedDelivery]:
            with self._read() as tx:
                rows = tx.rows("list_failed_deliveries", {"crawl": crawl, "url": url})
            return [FailedDelivery(*row) for row in rows]

        return self._run(go)

    def replay_deliveries(self, crawl: str, url: str | None = None) -> int:
        """Failed deliveries (to ``url``, or every endpoint of ``crawl``) due again from
        the start of the schedule, and their endpoints enabled; return how many."""

        def go() -> int:
            p = {"crawl": crawl, "url": url}
            with self._write() as tx:
                tx.run("enable_endpoints", p)
                return tx.run("replay_failed", p)

        return self._run(go)
