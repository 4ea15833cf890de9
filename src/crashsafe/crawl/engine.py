"""The crawl loop: lease → fetch → parse → commit, with group commit and graceful stop.

One worker process runs one :class:`Crawler`. It holds at most ``concurrency +
lease_ahead`` leases at a time, with at most ``concurrency`` requests among them, and a page
keeps its lease until its transaction has committed, so a kill repeats at most that many
pages (``concurrency`` with the default ``lease_ahead`` 0). The store runs in a process of
its own (SQLite) or on one dedicated thread (``store/process.py``); the committer task
gathers every page that finished while the previous commit was running into the next
transaction (group commit), each page whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from crashsafe.collector import rarer_gc
from crashsafe.crawl.passes import PassKeeper, Schedule
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.spider import Spider, start_requests_of
from crashsafe.crawl.upkeep import Upkeep
from crashsafe.errors import ConfigError, SpiderError, StoreError
from crashsafe.interrupts import GracefulInterrupts, stopping_line
from crashsafe.store import (
    STALE,
    Backoff,
    CrawlStats,
    Lease,
    PageOutcome,
    Politeness,
    Store,
    Waiting,
)
from crashsafe.store.process import store_runner
from crashsafe.tracing import span, tracer_from_env

if TYPE_CHECKING:
    from crashsafe.crawl.metrics import WorkerMetrics
    from crashsafe.crawl.pages import PageProcessor
    from crashsafe.crawl.sessions import CookieSync

# aiohttp (fetch, pages, addresses), yarl (allow) and rich (progress) are imported when a
# crawl runs, not with this module: a Crawler starts its store process when it is made,
# and that process gets going while they load.

T = TypeVar("T")
P = ParamSpec("P")
logger = logging.getLogger("crashsafe.crawl")
IDLE_POLL = 0.5  # seconds between looks at the frontier when nothing is due
RECLAIM_EVERY = 2.0  # seconds between checks for dead workers while waiting
STALL_CHECK_EVERY = 2.0  # seconds between looks at whether all that is left waits
MAX_FAILED_COMMITS = 3  # commits failing in a row before the crawl stops with the error


@dataclass(frozen=True, slots=True)
class CrawlResult:
    """How a run ended. ``stats`` are computed from the store's rows. ``gave_up`` names
    the origins the run stopped waiting for (every page left waited on their robots.txt
    for ``unreachable_timeout``); their pages are still pending."""

    interrupted: bool
    elapsed: float
    stats: CrawlStats
    gave_up: tuple[Waiting, ...] = ()
    waited: float = 0.0  # seconds it waited on them before it stopped
    limit: str | None = None  # "max_pages=10": the run stopped at a limit of its own
    cancelled_by: str | None = None  # `crashsafe cancel` ended the run: who


@dataclass(slots=True)
class _InFlight:
    lease: Lease
    started: bool = False  # holds a request slot (or is past it): no longer just leased
    requested: bool = False
    committing: bool = False  # its outcome is on its way to the store


class Crawler:
    """Runs one spider against one store until nothing is pending or leased.

    Args:
        spider: the Spider instance.
        store: an open Store (the crawler does not close it).
        settings: overrides ``spider.crawl_settings()`` when given.
        start_urls: replace the spider's ``start_requests()`` by GETs of these URLs.
        progress: show live progress (on a terminal).
        handle_signals: install SIGINT/SIGTERM handlers for a graceful stop.
        store_process: serve the store from a child process (default: yes for SQLite on
            POSIX) instead of a thread; the store object is then only used for its ``url``.
        store_server: a socket to a running ``store.server.serve`` loop (``crashsafe
            crawl --workers``) to send the store calls to instead.
        resolver: the DNS resolver under the address guard (default: the system's);
            tests map names to addresses with it.
        run: the id of the command's run (its workers' owner ids start with it, so
            ``Store.since`` counts this run's work apart from other commands').
        metrics: this worker's Prometheus counters (``crawl --metrics-port``), or None.
    """

    def __init__(
        self,
        spider: Spider,
        store: Store,
        *,
        settings: CrawlSettings | None = None,
        start_urls: Sequence[str] | None = None,
        progress: bool = False,
        handle_signals: bool = True,
        store_process: bool | None = None,
        store_server: socket.socket | None = None,
        resolver: Any = None,
        run: str = "",
        metrics: WorkerMetrics | None = None,
        tracer: Any = None,
        schedule: Schedule | None = None,
    ) -> None:
        if not spider.name:
            raise ConfigError(f"spider {type(spider).__name__} needs a name = '...'")
        self.spider = spider
        self.store = store
        self.crawl = spider.name
        self.settings = settings or spider.crawl_settings()
        self.start_urls = list(start_urls) if start_urls else None
        self.show_progress = progress
        self.handle_signals = handle_signals
        self._db = store_runner(store, store_process, server=store_server)
        self._inflight: dict[asyncio.Task[None], _InFlight] = {}  # leased, not committed
        self._max_leased = self.settings.concurrency + self.settings.lease_ahead
        s = self.settings
        self._politeness = Politeness(s.per_host_concurrency, s.per_host_delay)
        self._backoff = Backoff(s.backoff_base, s.backoff_max)
        self._requests = asyncio.Semaphore(self.settings.concurrency)
        self._slot_freed = asyncio.Event()
        self._commit_queue: list[tuple[PageOutcome, asyncio.Future[str | None]]] = []
        self._commit_ready = asyncio.Event()
        self._stopping = False
        self._closing = False  # the loop is over: the committer finishes and returns
        self._reserved = 0  # slots promised to a lease request still on its way
        self._failed_commits = 0  # in a row
        self._fatal: StoreError | SpiderError | ConfigError | None = None
        self._processor: PageProcessor | None = None
        self._resolver = resolver
        self.run_id = run
        self.owner = ""
        self._cookies: CookieSync | None = None
        self._gave_up: tuple[Waiting, ...] = ()
        self._waited = 0.0
        self._limit: str | None = None
        self._pages_done = 0  # pages this run committed done, and their records
        self._items_done = 0
        self._stall = _Stall(time.monotonic, self.settings.unreachable_timeout)
        self._cancelled_by: str | None = None
        self._metrics = metrics
        self._tracer = tracer if tracer is not None else tracer_from_env()
        self._passes: PassKeeper | None = None
        self.schedule = schedule

    async def _call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run one of the store's methods off the loop (a :class:`StoreCall`)."""
        return await self._db.call(fn, *args, **kwargs)

    # -- stopping --------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Stop leasing; in-flight pages get ``grace_seconds`` to commit."""
        self._stopping = True
        self._slot_freed.set()

    def _cancel(self, by: str) -> None:
        """``crashsafe cancel`` asked this worker to stop: as after Ctrl-C, what is in
        flight gets the grace period to commit, the rest goes back."""
        if self._cancelled_by is None:
            self._cancelled_by = by
            started = sum(1 for f in self._inflight.values() if f.started)
            logger.warning(
                "crawl %s cancelled by %s: finishing %d page(s) in flight, then stopping",
                self.crawl, by, started,
            )  # fmt: skip
            self.request_stop()

    def _on_signal(self) -> None:
        started = sum(1 for f in self._inflight.values() if f.started)
        # Said to the person at the terminal, as the command's own words: not a log line.
        sys.stderr.write(f"\n{stopping_line(f'finishing {started} page(s) in flight')}\n")
        self.request_stop()

    # -- committing ------------------------------------------------------------------------
    async def _commit(self, outcome: PageOutcome) -> str | None:
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._commit_queue.append((outcome, future))
        self._commit_ready.set()
        return await future

    async def _committer(self) -> None:
        """Commit whatever pages are waiting, and refill their slots in the same
        transaction: one round trip to the store per group of pages."""
        s = self.settings
        while True:
            await self._commit_ready.wait()
            self._commit_ready.clear()
            batch, self._commit_queue = self._commit_queue, []
            if not batch:
                if self._closing:
                    return
                continue
            # No refill by a commit that reaches this run's own limit: its leases would
            # start before the pages it commits are counted (then a run of max_pages=20
            # at concurrency 8 did 34 pages).
            stopping = self._stopping or self._reaches_limit(o for o, _ in batch)
            extra = 0
            if not stopping:
                extra = max(0, self._max_leased - len(self._inflight) - self._reserved)
            limit = 0 if stopping else extra + len(batch)
            self._reserved += extra
            began = time.perf_counter()
            try:
                errors, leases = await self._call(
                    self.store.commit_and_lease,
                    self.crawl,
                    [o for o, _ in batch],
                    owner=self.owner,
                    limit=limit,
                    lease_seconds=s.lease_seconds,
                    politeness=self._politeness,
                )
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                self._failed_commits += 1
                if self._failed_commits >= MAX_FAILED_COMMITS and self._fatal is None:
                    # The store keeps refusing: stop instead of fetching pages it cannot keep.
                    self._fatal = StoreError(
                        f"{self._failed_commits} commits in a row failed, stopping "
                        f"(last: {type(exc).__name__}: {exc})"
                    )
                    self.request_stop()
            else:
                self._failed_commits = 0
                if self._metrics is not None:
                    kinds = [o.kind for (o, _), e in zip(batch, errors, strict=True) if e is None]
                    self._metrics.committed(time.perf_counter() - began, kinds)
                for (outcome, fut), err in zip(batch, errors, strict=True):
                    if err is None and outcome.kind == "done":
                        self._count_done(outcome)  # (here: before the next batch's refill)
                    if not fut.done():
                        fut.set_result(err)
                await self._start(leases)
            finally:
                self._reserved -= extra
                if not self._inflight:
                    self._slot_freed.set()  # the main loop may be waiting on this reservation

    async def _start(self, leases: Sequence[Lease]) -> None:
        """Start a page task per lease; if a stop came while they were being leased, give
        them back instead (unfetched), so nothing starts after the drain has begun."""
        if self._stopping:
            if leases:
                await self._call(self.store.release, self.crawl, [(x, False) for x in leases])
            return
        assert self._processor is not None
        if self._cookies is not None and leases:
            # Another worker stored cookies since this jar was loaded (a login): load them
            # before fetching pages that may need them. If that fails, the pages go back
            # unfetched (a failure here must not end the committer, whose pages would wait
            # for it forever).
            try:
                await self._cookies.catch_up(max(x.cookies for x in leases))
            except Exception as exc:
                logger.warning(
                    "loading the stored cookies failed (%s); %d page(s) go back to the queue",
                    exc,
                    len(leases),
                )
                with contextlib.suppress(Exception):
                    await self._call(self.store.release, self.crawl, [(x, False) for x in leases])
                return
        for lease in leases:
            task = asyncio.create_task(self._run_page(lease))
            self._inflight[task] = _InFlight(lease)

    # -- one page --------------------------------------------------------------------------
    async def _run_page(self, lease: Lease) -> None:
        task = asyncio.current_task()
        assert task is not None
        slot = self._inflight[task]

        def requested() -> None:
            slot.requested = True

        try:
            assert self._processor is not None
            if self._tracer is None:
                await self._page(lease, slot, requested, None)
                return
            with span(self._tracer, "crawl.page", **{
                "crawl": self.crawl, "url.full": lease.url, "crashsafe.attempt": lease.attempts + 1,
            }) as page_span:  # fmt: skip
                await self._page(lease, slot, requested, page_span)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # Not finished (the database refused the commit, or a bug of ours): give the URL
            # back so it is fetched again; if even that fails, its lease lapses.
            logger.warning(
                "%s not finished (%s: %s); it goes back to the queue",
                lease.url,
                type(exc).__name__,
                exc,
            )
            with contextlib.suppress(Exception):
                await self._call(self.store.release, self.crawl, [(lease, slot.requested)])
        finally:
            self._inflight.pop(task, None)
            # The committer refills slots as pages commit; the main loop only needs waking
            # when the last page is out (the crawl may be over) or on a stop.
            if not self._inflight or self._stopping:
                self._slot_freed.set()

    async def _page(
        self, lease: Lease, slot: _InFlight, requested: Callable[[], None], page_span: Any
    ) -> None:
        """Fetch, parse and commit one page (its span, when traced, is ``page_span``)."""
        assert self._processor is not None
        async with self._requests:
            slot.started = True
            outcome = await self._processor.process(lease, requested)
            if self._metrics is not None and slot.requested and outcome.sent:
                self._metrics.requested(outcome.http_status)
            if page_span is not None:
                page_span.set_attribute("crashsafe.outcome", outcome.kind)
                page_span.set_attribute("crashsafe.records", len(outcome.records))
                if outcome.http_status is not None:
                    page_span.set_attribute("http.response.status_code", outcome.http_status)
            if outcome.kind != "deferred":
                self._stall.reset()  # a page got somewhere: not all that is left waits
            if self._processor.broken is not None and self._fatal is None:
                self._fatal = SpiderError(self._processor.broken)
                self.request_stop()
            if self._processor.halted is not None and self._fatal is None:
                self._fatal = StoreError(self._processor.halted)
                self.request_stop()
            if self._processor.unrunnable is not None and self._fatal is None:
                self._fatal = ConfigError(self._processor.unrunnable)  # no browser here
                self.request_stop()
        slot.committing = True
        with span(self._tracer, "crawl.commit"):
            error = await self._commit(outcome)
            if error is not None and error != STALE:
                # The page's own rows broke the transaction: store it as failed instead.
                await self._commit(PageOutcome(lease, "failed", outcome.http_status, error))

    def _reaches_limit(self, outcomes: Iterable[PageOutcome]) -> bool:
        """Whether committing ``outcomes`` would reach ``max_pages`` or ``max_items``."""
        s = self.settings
        if s.max_pages is None and s.max_items is None:
            return False
        done = [o for o in outcomes if o.kind == "done"]
        pages = self._pages_done + len(done)
        items = self._items_done + sum(len(o.records) for o in done)
        return (s.max_pages is not None and pages >= s.max_pages) or (
            s.max_items is not None and items >= s.max_items
        )

    def _count_done(self, outcome: PageOutcome) -> None:
        """Count a committed page toward ``max_pages``/``max_items``; stop at a limit."""
        s = self.settings
        self._pages_done += 1
        self._items_done += len(outcome.records)
        if self._limit is not None:
            return
        if s.max_pages is not None and self._pages_done >= s.max_pages:
            self._limit = f"max_pages={s.max_pages}"
        elif s.max_items is not None and self._items_done >= s.max_items:
            self._limit = f"max_items={s.max_items}"
        if self._limit is not None:
            self.request_stop()

    # -- the loop --------------------------------------------------------------------------
    async def run(self) -> CrawlResult:
        started = time.monotonic()
        try:
            async with GracefulInterrupts(self._on_signal, enabled=self.handle_signals):
                # The store's process is starting (spawned with the Crawler): import what
                # the first request needs meanwhile (aiohttp alone takes 0.15 s here).
                import crashsafe.crawl.assembly
                import crashsafe.crawl.fetch  # noqa: F401

                await self._db.start()
                with rarer_gc():
                    return await self._run(started)
        finally:
            with contextlib.suppress(Exception):
                await self._call(self.store.unregister_worker)
            await self._db.close()

    async def _run(self, started: float) -> CrawlResult:
        self.owner = await self._call(
            self.store.register_worker, self.crawl, pid=os.getpid(), run=self.run_id
        )
        await self._call(self.store.reclaim_dead_workers, self.crawl, backoff=self._backoff)
        from crashsafe.crawl.addresses import AddressGuard, GuardedResolver
        from crashsafe.crawl.allow import LinkFilter, host_and_port
        from crashsafe.crawl.sessions import CookieSync, SendBuilder

        requests = start_requests_of(self.spider, self.start_urls)
        links = LinkFilter(self.settings, [r.url for r in requests])
        from crashsafe.sealed import Sealer

        links.sealer = Sealer.for_store(self.store.url, self.settings.secret_headers)
        starts = links.start_requests(requests)
        start_origins = [host_and_port(r.url.partition("#")[0]) for r in starts]
        sends = SendBuilder(self.settings, start_origins)
        guard = AddressGuard.for_crawl(
            self.settings.allowed_addresses, start_origins, sends.proxy_endpoints()
        )
        await self._call(self.store.enqueue, self.crawl, starts)
        if not starts and not (await self._call(self.store.stats, self.crawl)).known:
            logger.warning(
                "spider %s has no start_urls and the database holds no URL of crawl %r: "
                "nothing to crawl. Set start_urls = [...] on the spider or pass --start-url.",
                type(self.spider).__name__,
                self.crawl,
            )
        from crashsafe.crawl.assembly import assemble
        from crashsafe.crawl.fetch import new_session

        resolver = GuardedResolver(guard, self._resolver)
        async with new_session(self.settings, resolver=resolver) as session:
            if self.settings.cookies_enabled:
                load = functools.partial(self._call, self.store.cookies, self.crawl)
                self._cookies = CookieSync(session.cookie_jar, load)
                await self._cookies.catch_up(0)
            processor, archive = await assemble(
                spider=self.spider, settings=self.settings, session=session, links=links,
                sends=sends, cookies=self._cookies, guard=guard, call=self._call,
                store=self.store, crawl=self.crawl, owner=self.owner,
            )  # fmt: skip
            self._processor = processor
            processor.tracer = self._tracer
            if (
                self.schedule is not None  # passes may begin while it runs
                or await self._call(self.store.last_pass_at, self.crawl) is not None
            ):
                processor.asks_changes = True  # a recrawl: changes only (revisits.py)
            if self.schedule is not None:  # a crawl that keeps running (crawl/passes.py)
                schedule = replace(self.schedule, early=self.settings.revisit_min / 4)
                self._passes = PassKeeper(schedule, self._call, self.store, self.crawl)
                await self._passes.start()
            try:
                interrupted = await self._loop()
            finally:
                if processor.renderer is not None:
                    await processor.renderer.close()
                if processor.robots is not None:
                    await processor.robots.close()
                if archive is not None:
                    await asyncio.to_thread(archive.close)
        if self._fatal is not None:
            raise self._fatal
        if not interrupted and not self._gave_up:
            # the pass is complete: what no page yielded in it is gone
            await self._call(self.store.finish_pass, self.crawl)
        stats = await self._call(self.store.stats, self.crawl)
        if self._limit is not None:
            interrupted = False  # stopped by its own limit, as asked: not interrupted
        return CrawlResult(
            interrupted, time.monotonic() - started, stats, self._gave_up, self._waited,
            self._limit, self._cancelled_by,
        )  # fmt: skip

    async def _loop(self) -> bool:
        s = self.settings
        committer = asyncio.create_task(self._committer())
        upkeep = Upkeep(
            call=self._call, store=self.store, crawl=self.crawl, lease_seconds=s.lease_seconds,
            backoff=self._backoff, inflight=self._inflight,
        )  # fmt: skip
        background = [
            asyncio.create_task(upkeep.renew_forever()),
            asyncio.create_task(upkeep.watch_peers_forever()),
            asyncio.create_task(upkeep.watch_controls_forever(self.owner, self._cancel)),
        ]
        if self.store.url.startswith("sqlite:"):
            background.append(asyncio.create_task(upkeep.tend_wal_forever(self.store.url)))
        progress = None
        if self.show_progress or (s.log_interval > 0 and logger.isEnabledFor(logging.INFO)):
            from crashsafe.crawl.progress import Progress

            live = self.show_progress
            progress = Progress(
                self.crawl, self.store, self._call, live=live, interval=s.log_interval
            )
            progress.start()
        min_batch = max(1, s.concurrency // 4)
        last_reclaim = 0.0
        stall = self._stall
        try:
            while not self._stopping:
                free = self._max_leased - len(self._inflight) - self._reserved
                # The committer refills slots as pages commit; this loop starts the crawl,
                # tops up when a refill found nothing due, and notices the end.
                if free >= min_batch or (not self._inflight and not self._reserved):
                    self._reserved += free
                    try:
                        leases = await self._call(
                            self.store.lease,
                            self.crawl,
                            self.owner,
                            free,
                            s.lease_seconds,
                            politeness=self._politeness,
                        )
                    finally:
                        self._reserved -= free
                    await self._start(leases)
                    if not leases and not self._inflight and not self._reserved:
                        due = await self._call(self.store.due, self.crawl)
                        if not due.open and self._passes is not None:
                            # the pass is complete: the next one, when it is due
                            wait = await self._passes.after_pass()
                            if wait is None:
                                break  # the run has had its passes (--passes)
                            if wait > 0:
                                await self._sleep(wait)
                            continue
                        if not due.open:
                            break  # nothing pending or leased anywhere: the crawl is complete
                        if time.monotonic() - last_reclaim > RECLAIM_EVERY:
                            last_reclaim = time.monotonic()
                            if await upkeep.reclaim():
                                continue
                        if stall.due_for_a_look():
                            fetchable = await self._call(self.store.fetchable, self.crawl)
                            if stall.over(fetchable):
                                waiting = await self._call(self.store.waiting, self.crawl)
                                self._gave_up = tuple(w for w in waiting if w.pages)
                                if self._gave_up:
                                    self._waited = stall.waited()
                                    break
                        # Due now, yet nothing leased: other workers hold the origin's
                        # slots (politeness), or its rows are locked by their claims.
                        wait = IDLE_POLL if due.wait is None else due.wait or 0.05
                        await self._sleep(min(max(wait, 0.01), IDLE_POLL))
                        continue
                # Pages are in flight or a lease request is on its way: wait for a slot (or
                # a reservation) to come back. Always await here: a loop that cannot lease
                # and does not yield would starve the very tasks that free the slots.
                self._slot_freed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._slot_freed.wait(), IDLE_POLL)
            interrupted = self._stopping
            if self._inflight:
                await self._drain()
            return interrupted
        finally:
            for task in background:
                task.cancel()
            # The committer commits what is queued, and gives back the leases a commit
            # granted during the stop, then returns: cancelling it could drop that
            # release before the store ran it (and leave those URLs leased).
            self._closing = True
            self._commit_ready.set()
            await committer
            if progress:
                await progress.stop()

    async def _sleep(self, seconds: float) -> None:
        self._slot_freed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._slot_freed.wait(), seconds)

    async def _drain(self) -> None:
        """Give back the leases not yet started, give in-flight pages the grace period,
        then give their leases back too."""
        waiting = [t for t, f in self._inflight.items() if not f.started]
        if waiting:
            unstarted = [(self._inflight[t].lease, False) for t in waiting]
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            await self._call(self.store.release, self.crawl, unstarted)
        tasks = list(self._inflight)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=self.settings.grace_seconds)
        # A page whose outcome is on its way to the store is past the point of giving
        # back: its commit is in the committer's hands (a release sent now could reach
        # the store first and have the commit refused as stale). It ends with that call.
        committing = [t for t in late if (f := self._inflight.get(t)) and f.committing]
        late = {t for t in late if t not in committing}
        if late:
            leftovers = [(self._inflight[t].lease, self._inflight[t].requested) for t in late]
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
            await self._call(self.store.release, self.crawl, leftovers)
        if committing:
            await asyncio.gather(*committing, return_exceptions=True)


class _Stall:
    """How long all that is left of a crawl has waited on unreachable origins.

    Looked at every ``STALL_CHECK_EVERY`` seconds while the worker has nothing to do; a
    page that gets anywhere (fetched, skipped, failed: anything but deferred for its
    robots.txt), or a look that finds a URL to fetch, starts it again.
    """

    def __init__(self, clock: Callable[[], float], timeout: float) -> None:
        self.clock, self.timeout = clock, timeout
        self.since: float | None = None
        self.looked = -STALL_CHECK_EVERY

    def reset(self) -> None:
        self.since = None

    def waited(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since

    def due_for_a_look(self) -> bool:
        now = self.clock()
        if now - self.looked < STALL_CHECK_EVERY:
            return False
        self.looked = now
        return True

    def over(self, fetchable: bool) -> bool:
        """Note a look's answer; whether the crawl has waited for ``timeout`` now."""
        if fetchable:
            self.since = None
            return False
        now = self.clock()
        if self.since is None:
            self.since = now
        return now - self.since >= self.timeout
