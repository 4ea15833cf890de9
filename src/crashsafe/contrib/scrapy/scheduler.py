"""A Scrapy scheduler whose queue is the crashsafe store.

- Requests that start the crawl (``start_urls``, ``start()``/``start_requests()``) are
  added to the store, keyed by Scrapy's fingerprint, so adding them on every run adds
  them once.
- ``next_request`` leases due requests from the store in batches (expiring leases, a
  liveness lock, fencing, the store's retry and backoff rules) and rebuilds them with
  Scrapy's ``request_from_dict``; each carries its lease in ``meta``.
- A request Scrapy makes from a leased one (a retry by RetryMiddleware, a redirect) comes
  back here with that lease and is sent under it: it stays the same frontier row. Only
  a request the downloader's middlewares make (a retry, a redirect, a rewritten URL)
  is taken so: one made once the page's answer has reached the spider (a callback's
  ``engine.crawl()`` with ``meta=response.meta``, an errback's
  ``failure.request.replace()``) is a request of its own, stored as a start request is
  but not taken for one by the address guard (sent under the page's lease, its answer
  was taken for the page's, or lost). One
  that a ``request_scheduled`` receiver drops on its way here (Scrapy's offsite filter
  drops a redirect off the allowed domains so, telling nobody) ends its page: done,
  "redirect to ... not followed", as a crawl of crashsafe's own ends it.
- A request Scrapy ends with no response and no error a middleware of crashsafe's sees
  (an exception raised in a downloader middleware's ``process_response``: "max
  redirections reached", a size cap while decompressing, a middleware that skips what
  is not HTML) reaches the errback every leased request carries (``errbacks.py``), which
  settles its page. Should one end unseen even so, its page fails once Scrapy has
  nothing left in flight: it asks the scheduler whether work remains only then, and a
  lease still held by then has no request anywhere.
- Requests that callbacks yield never come here: the spider middleware commits them with
  the response's items and done mark, in one transaction.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, cast

from scrapy import Request, Spider, signals
from scrapy.core.scheduler import BaseScheduler
from scrapy.crawler import Crawler

from crashsafe.contrib.scrapy.codec import LEASE_META, decode
from crashsafe.contrib.scrapy.errbacks import Settles
from crashsafe.contrib.scrapy.frontier import Frontier, logger
from crashsafe.errors import CrashsafeError
from crashsafe.store import Lease, PageOutcome

LOST = (
    "Scrapy ended the request without a response or an error crashsafe could see (an "
    "IgnoreRequest raised in a downloader middleware's process_response: max redirections "
    "reached, a size cap while decompressing...): its log says which"
)
DUE_CHECK_EVERY = 0.5  # seconds between looks at the store while nothing is leased here
EMPTY_PAUSE = 0.2  # seconds before leasing again after a claim found nothing due


class CrashsafeScheduler(BaseScheduler):
    """``SCHEDULER = "crashsafe.contrib.scrapy.CrashsafeScheduler"``."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        self.frontier = Frontier(crawler)
        crawler.crashsafe_frontier = self.frontier  # type: ignore[attr-defined]
        self.frontier.links_committed = self.more_due
        self.frontier.refill_limit = self._refill_limit
        self.frontier.leased = self._take
        self.batch = max(1, crawler.settings.getint("CONCURRENT_REQUESTS", 16))
        self._ready: deque[Lease] = deque()  # leased, not yet handed to Scrapy
        self._local: deque[Request] = deque()  # retries and redirects of leased requests
        self._open_until = 0.0  # due() said open work remains, until then
        self._empty_until = 0.0  # the last claim found nothing due: not before then
        self._idle = False  # the last claim found nothing
        self._waking: Any = None  # the timer that has the engine ask again (_wake_up)
        self.spider: Spider | None = None
        self._broken: str | None = None  # the frontier could not open: why
        # Requests of leased pages announced by request_scheduled and not (yet) enqueued:
        # the engine enqueues at once, unless a receiver dropped the request.
        self._announced: dict[int, Request] = {}
        crawler.signals.connect(self._scheduled, signal=signals.request_scheduled)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrashsafeScheduler:
        return cls(crawler)

    def open(self, spider: Spider) -> None:
        self.spider = spider
        settings = self.crawler.settings
        if settings.getbool("CRASHSAFE_ADDRESS_GUARD", True) and not hasattr(
            self.crawler, "crashsafe_guard"
        ):
            logger.warning(
                "crashsafe: the address guard is not enabled, so this crawl may connect to "
                "private, loopback and cloud metadata addresses: add "
                '"crashsafe.contrib.scrapy.CrashsafeAddressGuard": 950 to '
                "DOWNLOADER_MIDDLEWARES, or set CRASHSAFE_ADDRESS_GUARD = False to say so"
            )
        try:
            self.frontier.open(spider)
        except CrashsafeError as exc:
            # One line; the spider opens with nothing to do and is closed at once with
            # the reason (raised from here, Scrapy showed a traceback, then another about
            # a slot not assigned).
            logger.error("crashsafe: %s", exc)
            self._broken = f"crashsafe: {exc}"
            from twisted.internet import reactor

            cast(Any, reactor).callLater(0, self._close_broken)

    def _close_broken(self) -> None:
        from scrapy.utils.defer import deferred_from_coro

        engine = self.crawler.engine
        if engine is not None and self._broken is not None:
            deferred_from_coro(engine.close_spider_async(reason=self._broken))

    def close(self, reason: str) -> None:
        if self._waking is not None and self._waking.active():
            self._waking.cancel()
        if self._ready and self.frontier.store is not None:  # leased, never sent
            self.frontier.store.release(self.frontier.crawl_name, [(x, False) for x in self._ready])
            self._ready.clear()
        self.frontier.close()

    def _scheduled(self, request: Request, spider: Spider) -> None:
        if self._continues(request):
            self._announced[id(request)] = request

    def _continues(self, request: Request) -> bool:
        """Whether ``request`` carries on its page's fetch (a retry, a redirect, a URL a
        middleware rewrote: made before the page's answer reached the spider, under a
        lease still held), not a request made with a copy of the page's meta after."""
        lease = self.frontier.lease_of(request)
        return lease is not None and lease.grant_id not in self.frontier.answered

    def _settle_dropped(self) -> None:
        """End the pages whose retry or redirect a ``request_scheduled`` receiver dropped
        (the engine enqueues what it schedules right after the signal: what is still
        announced by the time it asks for work again was dropped)."""
        if not self._announced:
            return
        dropped, self._announced = self._announced, {}
        for request in dropped.values():
            lease = self.frontier.lease_of(request)
            if lease is None:
                continue
            if request.meta.get("redirect_urls"):
                reasons = request.meta.get("redirect_reasons") or [None]
                status = reasons[-1] if isinstance(reasons[-1], int) else None
                error = f"redirect to {request.url[:200]} not followed (dropped by Scrapy)"
                self.frontier.commit(PageOutcome(lease, "done", status, error))
            else:  # (a retry: no receiver of Scrapy's own drops one) it never succeeded
                error = "its retry was dropped by a request_scheduled receiver"
                self.frontier.commit(PageOutcome(lease, "failed", error=error))

    def _nothing_in_flight(self) -> bool:
        """Whether Scrapy holds no request at all: none between the scheduler and the end
        of its scraping (the engine's in-progress set), none downloading, none scraped.
        Scrapy asks ``has_pending_requests`` only then; asked again here, so that a
        version of Scrapy that asks at other times fails no page in flight."""
        engine = getattr(self.crawler, "engine", None)
        try:
            slot = engine._slot  # type: ignore[union-attr]
            if slot is not None and slot.inprogress:
                return False
            return not engine.downloader.active and bool(engine.scraper.slot.is_idle())  # type: ignore[union-attr]
        except AttributeError:  # (another Scrapy's insides: never settle then)
            return False

    def _settle_lost(self) -> None:
        """Fail the pages whose requests Scrapy ended without a response or an error that
        reached crashsafe (called when Scrapy has nothing in flight)."""
        for lease in list(self.frontier.leases.values()):
            logger.warning("%s: %s; the page fails", lease.url, LOST)
            self.frontier.commit(PageOutcome(lease, "failed", error=LOST))

    def enqueue_request(self, request: Request) -> bool:
        if self._broken is not None:
            return False
        copied = LEASE_META in request.meta
        if copied:
            if self._continues(request):  # a retry or redirect of a leased request
                self._announced.pop(id(request), None)
                self._local.append(request)
                return True
            del request.meta[LEASE_META]  # a copy of its meta: a request of its own
        # A start URL's host and port may be special (the guard lets them through), but not
        # a page's request made again (the guard may have refused it: an errback's
        # failure.request.replace() must not open it), here or once leased (depth 0 is a
        # seed's: depth 1, a page's request that came from somewhere)
        guard = getattr(self.crawler, "crashsafe_guard", None)
        if guard is not None and not copied:
            guard.allow_start(request.url)
        [row] = self.frontier.new_urls([request], parent="start", depth=int(copied))
        self.frontier.open_store.enqueue(self.frontier.crawl_name, [row])
        self._open_until = self._empty_until = 0.0  # look again
        return True

    def _refill_limit(self) -> int:
        """URLs a group commit may lease: up to a batch ready beside those in flight."""
        return max(0, self.batch - len(self._ready))

    def _take(self, leases: list[Lease]) -> None:
        self._ready.extend(leases)
        self.more_due()

    def more_due(self) -> None:
        """Requests were committed: claim at once, and wake the engine, which stops
        asking after a ``None`` until a download ends or its 5 s heartbeat (the commit
        ran on another thread meanwhile). The wake-up is Scrapy's own ``nextcall``, a
        private name: without it, the heartbeat still comes."""
        self._empty_until = 0.0
        nextcall = self._nextcall()
        if nextcall is not None:
            nextcall.schedule()

    def _nextcall(self) -> Any:
        slot = getattr(getattr(self.crawler, "engine", None), "_slot", None)
        return getattr(slot, "nextcall", None)

    def _wake_up(self, at: float) -> None:
        """Have the engine ask for work again at ``at`` (monotonic): after a ``None`` it
        asks only when a download ends or at its 5 s heartbeat, and a worker whose claim
        found nothing (other workers hold the leases) may have none under way. A timer of
        its own: ``nextcall.schedule(delay)`` would hold back every wake-up meant for now
        (a commit's, a download's) until then."""
        if self._waking is not None and self._waking.active():
            return
        from twisted.internet import reactor

        def wake() -> None:
            nextcall = self._nextcall()
            if nextcall is not None:
                nextcall.schedule()

        delay = max(0.0, at - time.monotonic())
        self._waking = cast(Any, reactor).callLater(delay, wake)

    def next_request(self) -> Request | None:
        if self._broken is not None:
            return None
        self._settle_dropped()
        if self._local:
            return self._local.popleft()
        # A group commit on its way refills the ready leases in its own transaction and
        # wakes the engine: claiming here meanwhile would wait for the store's lock.
        if not self._ready and not self.frontier.busy:
            if time.monotonic() >= self._empty_until:
                store = self.frontier.open_store
                leases = store.lease(
                    self.frontier.crawl_name, self.frontier.owner, self.batch,
                    self.frontier.lease_seconds,
                )  # fmt: skip
                if not leases:
                    self._empty_until = time.monotonic() + EMPTY_PAUSE
                    if not self._idle:  # (once each time this worker runs out of work)
                        logger.debug("crashsafe: nothing due to lease here; asking again")
                self._idle = not leases
                self._ready.extend(leases)
            if not self._ready:
                self._wake_up(self._empty_until)
        while self._ready:
            lease = self._ready.popleft()
            try:
                request = self._rebuild(lease)
            except Exception as exc:  # a stored request Scrapy cannot rebuild
                self.frontier.open_store.commit_pages(
                    self.frontier.crawl_name,
                    [_failed(lease, f"cannot rebuild the stored request: {exc!r}")],
                )
                logger.error("%s: cannot rebuild the stored request: %r", lease.url, exc)
                continue
            self.frontier.leases[lease.grant_id] = lease
            return request
        return None

    def _rebuild(self, lease: Lease) -> Request:
        assert self.spider is not None and lease.request is not None
        request = decode(lease.request, self.spider, self.frontier.sealer)
        request.meta[LEASE_META] = lease.grant_id
        request.errback = Settles(self.frontier, request.errback)  # (see errbacks.py)
        return request

    def has_pending_requests(self) -> bool:
        if self._broken is not None:
            return False
        self._settle_dropped()
        if self._local or self._ready or self.frontier.busy:
            return True
        if self.frontier.leases:
            if self._nothing_in_flight():  # (their requests ended unseen)
                self._settle_lost()
            return True  # (in flight, or their commit on its way)
        if time.monotonic() < self._open_until:
            return True
        due = self.frontier.open_store.due(self.frontier.crawl_name)
        if due.open:
            self._open_until = time.monotonic() + DUE_CHECK_EVERY
            if not self.frontier.leases:  # a dead worker's leases: take them back
                self.frontier.open_store.reclaim_dead_workers(self.frontier.crawl_name)
        return due.open


def _failed(lease: Lease, error: str) -> PageOutcome:
    return PageOutcome(lease, "failed", error=error)
