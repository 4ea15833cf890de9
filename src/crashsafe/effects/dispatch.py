"""The outbox dispatcher behind ``crashsafe deliver``: leased, signed, retried webhooks.

Delivery is at least once with a stable key: a dispatcher leases deliveries from the
store (several can run; a killed one's leases lapse and count an attempt), POSTs each
event signed per Standard Webhooks, and stores the answer. A kill between the receiver's
2xx and that store means the event is sent again with the same ``webhook-id`` and body;
the receiver drops ids it has seen (``effects/receiver.py``), which makes processing
exactly once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from crashsafe.effects.webhooks import (
    RetrySchedule,
    Signer,
    classify,
    event_body,
    event_id,
    parse_retry_after,
)
from crashsafe.store import Delivery, DeliveryResult, Store, masked
from crashsafe.store.liveness import new_owner_id
from crashsafe.text import printable

POLL = 1.0  # seconds between looks at the outbox when nothing is due (with --follow)
PRUNE_EVERY = 3600.0  # seconds between two prunings of old events (with --follow)


@dataclass(slots=True)
class DeliveryReport:
    """What one ``deliver`` run did, and what it left."""

    delivered: int = 0
    retried: int = 0
    failed: int = 0
    disabled: str | None = None  # why the endpoint was disabled during this run
    removed: bool = False  # the endpoint was removed (`deliver --remove`) during this run
    waiting: float | None = None  # seconds until the next delivery is due, when left
    interrupted: bool = False
    errors: dict[str, int] = field(default_factory=dict)
    pruned_events: int = 0  # old events pruned (``prune_after``), and their deliveries
    pruned_deliveries: int = 0


def payload(d: Delivery) -> tuple[str, bytes]:
    """The webhook id and body of a delivery: the same bytes on every attempt."""
    data = json.loads(d.data)
    gone_at = d.at if d.type == "record.gone" else None
    body = event_body(
        kind=d.type, crawl=d.crawl, record_id=d.record_id, version=d.version, url=d.url,
        data=data, written_at=d.at, gone_at=gone_at,
    )  # fmt: skip
    return event_id(d.crawl, d.record_id, d.version, d.type), body


class Dispatcher:
    """Delivers one crawl's outbox to one webhook endpoint.

    Args:
        store: an open store (used from this thread only).
        crawl: the crawl whose events are sent.
        url: the webhook URL (redirects are not followed).
        signer: signs with the endpoint's secret.
        schedule: waits between attempts; when it is spent the delivery fails.
        concurrency: requests in flight.
        timeout: seconds for one request, connection included.
        lease_seconds: how long a leased delivery is this dispatcher's; longer than
            ``timeout``, so an answer is stored before the lease can lapse.
        max_wait: without ``follow``, a run ends when the next delivery is due later
            than this (a retry hours away); with ``follow`` it waits.
        clock: seconds since the epoch (the ``webhook-timestamp``).
        prune_after: events older than this many seconds that no endpoint still has to
            deliver are pruned when the run has nothing to send (then every hour with
            ``follow``); None: never.
    """

    def __init__(
        self,
        store: Store,
        crawl: str,
        url: str,
        signer: Signer,
        schedule: RetrySchedule,
        *,
        concurrency: int = 4,
        timeout: float = 10.0,
        lease_seconds: float = 60.0,
        max_wait: float = 60.0,
        clock: Callable[[], float] = time.time,
        prune_after: float | None = None,
    ) -> None:
        self.store, self.crawl, self.url = store, crawl, url
        self.prune_after = prune_after
        self._pruned_at: float | None = None  # (time.monotonic)
        self.signer, self.schedule = signer, schedule
        self.concurrency, self.timeout = concurrency, timeout
        self.lease_seconds = max(lease_seconds, timeout + 1)
        self.max_wait, self.clock = max_wait, clock
        self.owner = new_owner_id()
        self.stopping = asyncio.Event()
        self.report = DeliveryReport()

    def stop(self) -> None:
        """Lease nothing more; the requests in flight are cut short, and their deliveries
        given back due at once (the next run sends them: the same id, so a receiver that
        got one drops it)."""
        sys.stderr.write("\nStopping: giving back the deliveries in flight...\n")
        self.stopping.set()
        self.report.interrupted = True

    async def run(self, *, follow: bool = False) -> DeliveryReport:
        endpoint = await asyncio.to_thread(self.store.endpoint, self.crawl, self.url)
        if endpoint.disabled_at is not None:
            self.report.disabled = endpoint.disabled_why or "disabled"
            return self.report
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while not self.stopping.is_set():
                leased = await asyncio.to_thread(
                    self.store.lease_deliveries,
                    endpoint.id, self.owner, self.concurrency, self.lease_seconds,
                )  # fmt: skip
                if leased:
                    results = await self._send_all(session, leased)
                    gone = any(r.status == 410 for r in results)
                    why = f"{masked(self.url)} answered 410 Gone" if gone else None
                    await asyncio.to_thread(
                        self.store.finish_deliveries, self.owner, results, disable=why
                    )
                    if why is not None:
                        self.report.disabled = why
                        break
                    continue
                now = await asyncio.to_thread(self.store.find_endpoint, self.crawl, self.url)
                if now is None or now.id != endpoint.id:  # `deliver --remove` (and added
                    self.report.removed = True  # again since: another endpoint's rows)
                    break
                if now.disabled_at is not None:  # by another dispatcher
                    self.report.disabled = now.disabled_why or "disabled"
                    break
                await self._prune()
                due = await asyncio.to_thread(self.store.deliveries_due, endpoint.id)
                if due is None and not follow:
                    break
                if due is not None and due > self.max_wait and not follow:
                    self.report.waiting = due
                    break
                wait = POLL if due is None else min(max(due, 0.01), POLL if follow else due)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), wait)
        return self.report

    async def _prune(self) -> None:
        """Prune old events once nothing is due now, at most every ``PRUNE_EVERY``."""
        if self.prune_after is None:
            return
        if self._pruned_at is not None and time.monotonic() - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = time.monotonic()
        pruned = await asyncio.to_thread(self.store.prune_outbox, self.crawl, self.prune_after)
        self.report.pruned_events += pruned.events
        self.report.pruned_deliveries += pruned.deliveries

    async def _send_all(
        self, session: aiohttp.ClientSession, leased: list[Delivery]
    ) -> list[DeliveryResult]:
        """Send ``leased`` at once; on :meth:`stop`, cut the requests still waiting for an
        answer short (a hanging receiver must not hold Ctrl-C for ``timeout``)."""
        sends = [asyncio.ensure_future(self._send(session, d)) for d in leased]
        stopped = asyncio.ensure_future(self.stopping.wait())
        try:
            pending: set[asyncio.Future[Any]] = set(sends)
            while pending and not stopped.done():
                _, pending = await asyncio.wait(
                    {*pending, stopped}, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(stopped)
        finally:
            stopped.cancel()
            for send in sends:
                send.cancel()
            await asyncio.gather(*sends, return_exceptions=True)
        return [
            DeliveryResult(d, "retry", None, "cut short by a stop before an answer", 0.0)
            if send.cancelled()
            else send.result()
            for d, send in zip(leased, sends, strict=True)
        ]

    async def _send(self, session: aiohttp.ClientSession, d: Delivery) -> DeliveryResult:
        try:
            msg_id, body = payload(d)
        except (ValueError, TypeError, RecursionError) as exc:  # this event only
            self.report.failed += 1
            error = f"the event cannot be sent as JSON: {type(exc).__name__}: {exc}"
            return DeliveryResult(d, "failed", None, printable(error))
        now = self.clock()
        headers = self.signer.headers(msg_id, body, now)
        status: int | None = None
        retry_after: float | None = None
        try:
            async with session.post(
                self.url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                retry_after = parse_retry_after(response.headers.get("Retry-After"), now)
                await response.read()  # the connection goes back to the pool whole
            error = f"HTTP {status}"
        except TimeoutError:
            error = f"no answer within {self.timeout:g} s"
        except aiohttp.ClientError as exc:
            error = printable(f"{type(exc).__name__}: {exc}")
        verdict = classify(status)
        if verdict == "delivered":
            self.report.delivered += 1
            return DeliveryResult(d, "delivered", status)
        self.report.errors[error] = self.report.errors.get(error, 0) + 1
        if verdict == "disable":  # due again once the endpoint is turned back on
            return DeliveryResult(d, "retry", status, error, 0.0)
        delay = self.schedule.delay(d.attempts, retry_after=retry_after)
        if delay is None:
            self.report.failed += 1
            return DeliveryResult(d, "failed", status, f"{error} (gave up after "
                                  f"{d.attempts} attempts)")  # fmt: skip
        self.report.retried += 1
        return DeliveryResult(d, "retry", status, error, delay)
