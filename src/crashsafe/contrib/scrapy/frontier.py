"""What the Scrapy scheduler and middlewares share: one crashsafe store, this worker's
leases, and the commit of a response's output with its done mark.

One per Scrapy crawler (``crawler.crashsafe_frontier``), opened by the scheduler when
the spider opens. Commits run on a thread of their own, so the reactor never waits for a
disk's fsync: responses that settle while one commit runs go into the next, together
(group commit), each whole. The scheduler's few calls (a claim per batch, start
requests) are made on the reactor thread; a lock keeps the two from using the store's
connection at once.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from itemadapter import ItemAdapter
from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.utils.misc import load_object
from twisted.internet import task

from crashsafe.contrib.scrapy.codec import LEASE_META, encode, frontier_key
from crashsafe.errors import ConfigError
from crashsafe.ids import record_id
from crashsafe.sealed import Sealer
from crashsafe.store import STALE, Lease, NewUrl, PageOutcome, RecordRow, Store, masked, open_store
from crashsafe.store.values import META_PREFIX

logger = logging.getLogger("crashsafe.scrapy")

DEFAULT_DB = "sqlite:///crashsafe.db"
SWITCH_INTERVAL = 0.0005  # seconds: see Frontier.open


def database_of(settings: Any) -> tuple[str, str]:
    """``CRASHSAFE_DB`` and where it came from, in this order: ``-s`` on the command line,
    the ``CRASHSAFE_DB`` environment variable, the setting (settings.py, the spider's
    ``custom_settings``), the default (``sqlite:///crashsafe.db``): a deployment's
    environment wins over the project's file, as the command line wins over both."""
    from scrapy.settings import SETTINGS_PRIORITIES

    given = settings.get("CRASHSAFE_DB")
    priority = settings.getpriority("CRASHSAFE_DB") or 0
    env = os.environ.get("CRASHSAFE_DB")
    if given and priority >= SETTINGS_PRIORITIES["cmdline"]:
        return str(given), "-s CRASHSAFE_DB"
    if env:
        return env, "the CRASHSAFE_DB environment variable"
    if given:
        return str(given), "the CRASHSAFE_DB setting"
    return DEFAULT_DB, "the default (no CRASHSAFE_DB)"


def item_keyer(setting: Any) -> Callable[[Mapping[str, Any]], Any]:
    """``CRASHSAFE_ITEM_KEY``: a field name, a function of the item (as a dict), or the
    import path of one (``"myproject.keys:sku"``)."""
    if setting is None:
        raise ConfigError(
            "CRASHSAFE_ITEM_KEY is not set: name the item field that identifies an item "
            "(CRASHSAFE_ITEM_KEY = 'sku'), or a function of the item"
        )
    if isinstance(setting, str) and ":" not in setting and "." not in setting:
        return lambda item: item.get(setting)
    function = load_object(setting.replace(":", ".")) if isinstance(setting, str) else setting
    if not callable(function):
        raise ConfigError(f"CRASHSAFE_ITEM_KEY {setting!r} is not a field name or a function")
    return function  # type: ignore[no-any-return]


@dataclass(slots=True)
class Pending:
    """A response's outcome waiting for its items to come out of the item pipelines."""

    outcome: PageOutcome
    expected: int
    seen: int = 0
    records: list[RecordRow] = field(default_factory=list)


class Frontier:
    """One Scrapy process's view of the crawl's frontier (see the module docstring)."""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        settings = crawler.settings
        self.db, self.db_from = database_of(settings)
        self.sealer = Sealer.for_store(self.db, settings.getlist("CRASHSAFE_SECRET_HEADERS"))
        self.crawl_name: str = settings.get("CRASHSAFE_CRAWL") or ""
        self.lease_seconds = settings.getfloat("CRASHSAFE_LEASE_SECONDS", 60.0)
        self.key: Callable[[Mapping[str, Any]], Any] = lambda item: None  # set by open()
        self.fingerprint = crawler.request_fingerprinter.fingerprint
        self.store: Store | None = None
        self.owner = ""
        self.spider: Spider | None = None
        self.leases: dict[int, Lease] = {}  # grant id -> lease, for requests in flight
        # leases whose page's answer has reached the spider (its middleware says so): a
        # request with the lease in its meta made since is not the page's retry/redirect
        self.answered: set[int] = set()
        # Leases whose answer went to the errback (a status the spider refused): what it
        # yields is committed with the page, not as a parse of it (listings kept).
        self.errbacked: set[int] = set()
        self.pending: dict[int, Pending] = {}  # grant id -> output waiting for pipelines
        self._renewal: task.LoopingCall | None = None
        #: called after a group commit (the scheduler claims at once and wakes the engine,
        #: which may find new requests, or the crawl complete)
        self.links_committed: Callable[[], None] = lambda: None
        #: how many URLs a group commit may lease for the scheduler, and where they go:
        #: refilled in the commit's own transaction, the reactor need not claim itself
        self.refill_limit: Callable[[], int] = lambda: 0
        self.leased: Callable[[list[Lease]], None] = lambda leases: None
        self._lock = threading.Lock()  # one user of the store's connection at a time
        self._queue: list[PageOutcome] = []  # settled, waiting for the committer thread
        self._committer: concurrent.futures.ThreadPoolExecutor | None = None
        self._committing = False
        self._closing = False

    # -- life ------------------------------------------------------------------------------
    def open(self, spider: Spider) -> None:
        """Open the store and take part in the crawl; a ConfigError or StoreError says what
        is wrong in one line (the scheduler closes the spider with it)."""
        self.key = item_keyer(self.crawler.settings.get("CRASHSAFE_ITEM_KEY"))
        self.spider = spider
        self.crawl_name = self.crawl_name or spider.name
        self.store = cast(Store, _Locked(open_store(self.db, create=True), self._lock))
        stats = self.store.stats(self.crawl_name)
        went = f"resuming crawl {self.crawl_name!r}" if stats.known else "starting crawl"
        if not stats.known:
            went += f" {self.crawl_name!r}"
        logger.info(
            "crashsafe: %s on %s (from %s): %d done, %d pending, %d failed",
            went, masked(self.db), self.db_from, stats.done, stats.pending + stats.leased,
            stats.failed,
        )  # fmt: skip
        self._committer = concurrent.futures.ThreadPoolExecutor(1, "crashsafe-commit")
        # The committer thread gives up the GIL at every SQLite call and must win it back
        # from a busy reactor thread each time, which takes up to the switch interval
        # (5 ms): a group commit took 18 ms, and the crawl ran at 0.6x plain Scrapy.
        # At 0.5 ms while the frontier is open: 15.4 s -> 10.4 s for 3 150 pages.
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL))
        self.owner = self.store.register_worker(self.crawl_name, pid=os.getpid())
        self.store.reclaim_dead_workers(self.crawl_name)
        self._renewal = task.LoopingCall(self._renew)
        self._renewal.start(self.lease_seconds / 3, now=False)

    def close(self) -> None:
        self._closing = True
        if self._renewal is not None and self._renewal.running:
            self._renewal.stop()
        if self._committer is not None:  # every settled response committed first
            self._committer.shutdown(wait=True)
            self._committer = None
            if self._queue and self.store is not None:
                self._commit_now(self._queue)
                self._queue = []
            sys.setswitchinterval(self._switch)
        if self.store is not None:
            if self.leases:  # in flight when the spider closed: fetched, maybe
                self.store.release(self.crawl_name, [(x, True) for x in self.leases.values()])
                self.leases.clear()
                self.answered.clear()
                self.errbacked.clear()
            # A complete pass (nothing pending or leased; else this does nothing): the
            # records of pages fetched again that no page yielded are gone.
            self.store.finish_pass(self.crawl_name)
            self.store.close()
            self.store = None

    @property
    def open_store(self) -> Store:
        if self.store is None:
            raise ConfigError("the crashsafe frontier is not open: set SCHEDULER too")
        return self.store

    def _renew(self) -> None:
        if self.store is None or not self.leases:
            return
        try:
            lost = self.store.renew(self.crawl_name, list(self.leases.values()), self.lease_seconds)
        except Exception as exc:  # the commits will tell
            logger.warning("renewing leases failed (%s); trying again", exc)
            return
        for lease in lost:  # paused past the lease: its commit will be refused
            logger.warning(
                "lease of %s lost (paused past it?); its output will be refused", lease.url
            )

    # -- requests --------------------------------------------------------------------------
    def new_urls(self, requests: Iterable[Request], *, parent: str, depth: int) -> list[NewUrl]:
        """``requests`` as frontier rows (keyed and stored as the codec says)."""
        assert self.spider is not None
        rows, unfiltered = [], 0
        for request in requests:
            if request.dont_filter:
                unfiltered += 1
            key = frontier_key(
                request, self.fingerprint(request), parent=parent, ordinal=unfiltered,
                sealer=self.sealer,
            )  # fmt: skip
            stored = encode(request, self.spider, self.sealer)
            rows.append(NewUrl(key, depth, None, request.priority, stored))
        return rows

    def lease_of(self, request: Request) -> Lease | None:
        token = request.meta.get(LEASE_META)
        return None if token is None else self.leases.get(token)

    # -- outcomes --------------------------------------------------------------------------
    def record(self, item: Any, url: str) -> RecordRow:
        data = ItemAdapter(item).asdict()
        key = self.key(data)
        if key is None or key == "" or not isinstance(key, str | int) or isinstance(key, bool):
            raise ConfigError(
                f"an item's key (CRASHSAFE_ITEM_KEY) is {key!r}: it must be a non-empty "
                f"string or an integer (item: {str(data)[:200]})"
            )
        taken = [str(k) for k in data if str(k).startswith(META_PREFIX)]
        if taken:
            raise ConfigError(
                f"an item has a field {taken[0]!r}: fields named {META_PREFIX}* are "
                "crashsafe's own (exports add them); rename it"
            )
        source = self.crawl_name
        return RecordRow.build(
            id=record_id(source, str(key)),
            source=source,
            key=str(key),
            url=url,
            data=data,
            is_item=True,
        )

    def item_done(self, item: Any, response: Any, *, keep: bool) -> None:
        """One item of a pending response came out of the pipelines (``keep``: stored)."""
        request = getattr(response, "request", None)
        token = None if request is None else request.meta.get(LEASE_META)
        pending = self.pending.get(token) if token is not None else None
        if pending is None or token is None:
            return
        pending.seen += 1
        if keep:
            try:
                pending.records.append(self.record(item, response.url))
            except (ConfigError, TypeError, ValueError) as exc:
                pending.outcome = replace(pending.outcome, kind="failed", error=str(exc), links=())
                logger.error("%s: %s", response.url, exc)
        if pending.seen >= pending.expected:
            self.settle(token)

    def settle(self, token: int) -> None:
        """Commit the pending outcome of grant ``token``, with its records."""
        pending = self.pending.pop(token)
        outcome = pending.outcome
        if outcome.kind == "done":
            outcome = replace(outcome, records=pending.records)
        self.commit(outcome)

    def _forget(self, lease: Lease) -> None:
        """``lease`` is no longer in flight here (committed or given back)."""
        self.leases.pop(lease.grant_id, None)
        self.answered.discard(lease.grant_id)
        self.errbacked.discard(lease.grant_id)

    def release(self, lease: Lease) -> None:
        """Give ``lease`` back (fetched: an attempt), its page to be fetched again."""
        self._forget(lease)
        self.open_store.release(self.crawl_name, [(lease, True)])

    @property
    def busy(self) -> bool:
        """Whether outcomes are waiting or being committed (their commit refills the
        scheduler's leases: no need to claim meanwhile)."""
        return self._committing or bool(self._queue) or bool(self.pending)

    def commit(self, outcome: PageOutcome) -> None:
        """Commit ``outcome`` soon, on the committer thread, with whatever else settled
        meanwhile (each outcome whole)."""
        self._forget(outcome.lease)
        self._queue.append(outcome)
        if not self._committing and self._committer is not None:
            self._submit()

    def _submit(self) -> None:
        assert self._committer is not None
        self._committing = True
        batch, self._queue = self._queue, []
        self._committer.submit(self._commit_thread, batch, self.refill_limit())

    def _commit_thread(self, batch: list[PageOutcome], limit: int) -> None:
        # (imported here: the reactor is Scrapy's to install, before this runs)
        from twisted.internet import reactor

        leases: list[Lease] = []
        try:
            _, leases = self._commit_now(batch, limit)
            if leases and self._closing:  # the spider is closing: give them back unfetched
                self.open_store.release(self.crawl_name, [(x, False) for x in leases])
                leases = []
        except Exception as exc:  # the store refused the whole group: leases will lapse
            logger.error("committing %d response(s) failed: %s", len(batch), exc)
        reactor.callFromThread(self._committed, batch, leases)

    def _commit_now(
        self, batch: list[PageOutcome], limit: int = 0
    ) -> tuple[list[str | None], list[Lease]]:
        errors, leases = self.open_store.commit_and_lease(
            self.crawl_name, batch, owner=self.owner, limit=limit,
            lease_seconds=self.lease_seconds,
        )  # fmt: skip
        for outcome, error in zip(batch, errors, strict=True):
            if error == STALE:
                logger.warning("%s: %s", outcome.lease.url, error)
            elif error is not None:  # the page's own rows could not be stored
                failed = PageOutcome(outcome.lease, "failed", outcome.http_status, error)
                self.open_store.commit_pages(self.crawl_name, [failed])
                logger.error("%s", error)
        return errors, leases

    def _committed(self, batch: list[PageOutcome], leases: list[Lease]) -> None:
        """On the reactor thread, after a group commit: hand its leases to the scheduler,
        start the next group, if any."""
        self._committing = False
        if leases and self.store is not None:
            self.leased(leases)
        else:  # new requests to claim, or the last pages done: the engine looks again
            self.links_committed()
        if self._queue and self._committer is not None:
            self._submit()


class _Locked:
    """A store whose methods take ``lock`` (the committer thread uses it too)."""

    def __init__(self, store: Store, lock: threading.Lock) -> None:
        self._store, self._lock = store, lock

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._store, name)
        if not callable(attribute):
            return attribute

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attribute(*args, **kwargs)

        return locked
