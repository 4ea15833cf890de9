"""The Store contract every backend implements (its values: ``store/values.py``).

A store is synchronous and used from one thread at a time; the crawl engine runs it in a
child process or a dedicated thread (``store/process.py``) so the event loop never waits
on the database. What is the same for every backend (outcome rules, fencing, attempts,
stats) lives in ``store/core.py``; a backend is its connection handling plus its named
SQL in ``store/sql/<dialect>/``, and every backend passes one contract suite
(``tests/contract``).

Time: a store keeps times in its own clock (the database's for PostgreSQL, so workers on
machines whose clocks disagree still agree on leases and backoffs). Across this boundary
times that a worker computes travel as durations (``retry_in``, ``age``, ``wait``), never
as instants of the worker's clock; instants a store returns (``first_seen``,
``failed_at``, ``started_at``) are for people to read.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Any, Protocol

from crashsafe.store.control_values import AuditEntry, Control, PausedOrigin
from crashsafe.store.effect_values import (
    Delivery,
    DeliveryResult,
    EffectStats,
    Endpoint,
    FailedDelivery,
    FileRow,
    HighWater,
    Pass,
    PassFigures,
    PassTurn,
    Pruned,
    RunFigures,
)
from crashsafe.store.values import (
    STALE,
    Backoff,
    CookieRow,
    CrawlStats,
    Due,
    FailedUrl,
    Lease,
    NewUrl,
    Outcome,
    PageOutcome,
    Politeness,
    RecordRow,
    RobotsEntry,
    StoredCookies,
    StoredRecord,
    Waiting,
    WalState,
    WorkerInfo,
    canonical_json,
    pickled_as_tuple,
    storable,
    storable_data,
)

__all__ = [
    "STALE",
    "AuditEntry",
    "Backoff",
    "Control",
    "CookieRow",
    "CrawlStats",
    "Delivery",
    "DeliveryResult",
    "Due",
    "EffectStats",
    "Endpoint",
    "FailedDelivery",
    "FailedUrl",
    "FileRow",
    "HighWater",
    "Lease",
    "NewUrl",
    "Outcome",
    "PageOutcome",
    "Pass",
    "PassFigures",
    "PassTurn",
    "PausedOrigin",
    "Politeness",
    "Pruned",
    "RecordRow",
    "RobotsEntry",
    "RunFigures",
    "Store",
    "StoredCookies",
    "StoredRecord",
    "Waiting",
    "WalState",
    "WorkerInfo",
    "canonical_json",
    "pickled_as_tuple",
    "storable",
    "storable_data",
]


class Store(Protocol):
    """Durable frontier, records and lease history for any number of crawls."""

    url: str

    def close(self) -> None: ...

    # -- workers -------------------------------------------------------------------------
    def register_worker(self, crawl: str = "", *, pid: int | None = None, run: str = "") -> str:
        """Take a liveness lock that dies with this process (or its database session);
        return the owner id. ``crawl`` and ``pid`` (the crawl's process, which may not
        be the store's: default this one) are what :meth:`workers` shows; ``run`` (a
        command's id) leads the owner id, for :meth:`since`."""
        ...

    def unregister_worker(self) -> None: ...

    def reclaim_dead_workers(self, crawl: str, *, backoff: Backoff | None = None) -> int:
        """Put back to pending the leases of workers whose liveness lock is free; each
        counts an attempt (it may have fetched). A URL tried for the first time is due at
        once; one tried before waits (with ``backoff`` given) at least 5 s or its retry
        backoff, stretched by up to half at random, so that in a crash loop the URLs a
        dying worker held are not the first its restart takes again."""
        ...

    def workers(self, crawl: str | None = None) -> list[WorkerInfo]:
        """Workers alive, or dead while still holding leases (of ``crawl``, or any)."""
        ...

    # -- frontier ------------------------------------------------------------------------
    def enqueue(self, crawl: str, urls: Iterable[NewUrl]) -> int:
        """Add URLs; known ones are left as they are. Return how many were new."""
        ...

    def lease(
        self,
        crawl: str,
        owner: str,
        limit: int,
        lease_seconds: float,
        *,
        politeness: Politeness | None = None,
    ) -> list[Lease]:
        """Grant up to ``limit`` due URLs to ``owner``: pending ones whose backoff is
        over, and leases that lapsed (their grant ends here and counts an attempt).
        ``politeness`` limits the grants per origin for all workers together."""
        ...

    def renew(self, crawl: str, leases: Sequence[Lease], lease_seconds: float) -> list[Lease]:
        """Extend the leases that are still the current grant of their URL; return the
        others (lapsed and granted again, or finished): their commits will be refused."""
        ...

    def release(self, crawl: str, leases: Iterable[tuple[Lease, bool]]) -> None:
        """Give leases back unfinished; the flag says whether a request was already made
        (it then counts an attempt). A lease that is no longer current changes nothing."""
        ...

    def commit_pages(self, crawl: str, outcomes: Sequence[PageOutcome]) -> list[str | None]:
        """Commit each page whole or not at all; return per page None or the error.

        Fencing: a page whose lease is no longer the current grant of its URL is refused
        whole (:data:`STALE`), whatever its kind; nothing of it is written but its grant's
        outcome ``stale``. This is what keeps a worker that was paused past its lease from
        overwriting what the new owner committed. Any other page that cannot be stored
        gets an error naming its URL, and its neighbours in the group still commit.
        """
        ...

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
        """``commit_pages``, then ``lease`` up to ``limit`` URLs in the same transaction.

        The crawl engine refills the slots a group of pages frees in one round trip.
        ``limit`` counts the slots the committed pages free; a page that fails to commit
        keeps its slot, so each such page leases one URL fewer.
        """
        ...

    def due(self, crawl: str) -> Due: ...

    def cookies(self, crawl: str) -> StoredCookies:
        """The cookies the crawl's committed pages set, in the order they were set
        (replaying them in order rebuilds the cookie jar), with their version."""
        ...

    def validators(self, crawl: str, ids: Sequence[int]) -> dict[int, str]:
        """What the last fetch of each done page of ``ids`` showed (JSON: its ETag,
        Last-Modified, body digest and spider), for a recrawl to ask for changes only."""
        ...

    def pass_revisits(self, crawl: str) -> dict[str, tuple[int, int]]:
        """The last pass's fetches by how they went (``fetched``: parsed;
        ``not-modified``: a 304; ``unchanged``: the same body, not parsed): ``{how:
        (pages, body bytes downloaded)}``."""
        ...

    def render_patterns(self, crawl: str) -> dict[str, tuple[int, int]]:
        """Auto rendering's counts per URL pattern: ``{pattern: (pages fine as fetched,
        pages that needed the browser)}``, as committed."""
        ...

    # -- reading -------------------------------------------------------------------------
    def crawls(self) -> list[str]: ...

    def stats(self, crawl: str) -> CrawlStats: ...

    def failed(self, crawl: str | None = None) -> list[FailedUrl]: ...

    def retry_failed(
        self,
        crawl: str | None = None,
        *,
        actor: str | None = None,
        urls: Sequence[str] | None = None,
    ) -> int:
        """Put failed URLs back in the queue (only ``urls`` of ``crawl``, if given); with
        ``actor``, recorded in the audit."""
        ...

    def record_versions(
        self, crawl: str, record_id: str, *, limit: int = 100
    ) -> list[tuple[int, str, float, Any]]:
        """``(version, event type, when, data)`` of a record's versions, oldest first."""
        ...

    def iter_versions(
        self, crawl: str, *, keys: Collection[str] | None = None
    ) -> Iterator[tuple[StoredRecord, str]]:
        """Every version stored of ``crawl``'s records (of those whose key is in ``keys``;
        gone ones too), by record id then version: ``(the record as it was then,
        "created" | "updated" | "gone")``; the earlier versions as far back as the
        outbox's retention."""
        ...

    def find_records(self, crawl: str, text: str, *, limit: int = 50) -> list[StoredRecord]:
        """Records of ``crawl`` whose key holds ``text`` (gone ones too), by key."""
        ...

    # -- steering (store/sql_control.py) -----------------------------------------------------
    def pause(self, crawl: str, *, actor: str, origin: str | None = None) -> bool:
        """No claim grants a URL of ``crawl`` (or of ``origin`` in it) until resumed;
        False if it was paused already."""
        ...

    def resume(self, crawl: str, *, actor: str, origin: str | None = None) -> bool: ...

    def knows_origin(self, crawl: str, origin: str) -> bool: ...

    def touch_worker(self, owner: str) -> None:
        """Note that worker ``owner`` is at work now (``WorkerInfo.last_seen``)."""
        ...

    def finished_per_minute(self, crawl: str, since: float) -> list[tuple[int, int]]:
        """``(minute after since, pages done or failed in it)``, oldest first."""
        ...

    def deliveries_by_endpoint(self, crawl: str) -> dict[str, dict[str, int]]:
        """Each webhook endpoint of ``crawl`` (its URL) and its deliveries by state."""
        ...

    def cancel(self, crawl: str, *, actor: str) -> int:
        """Ask the crawl's live workers to end their runs; how many were asked."""
        ...

    def control(self, crawl: str, owner: str | None = None) -> Control: ...

    def audit(self, crawl: str | None = None, *, limit: int = 100) -> list[AuditEntry]: ...

    def iter_records(
        self, crawl: str | None = None, *, since: float | None = None, changed_only: bool = False
    ) -> Iterator[StoredRecord]:
        """Live records, by crawl then id, read a page per short transaction; with
        ``since`` a change feed:
        the records created, changed or gone at or after ``since`` (gone ones with
        ``gone_at``), and with ``changed_only`` not those first seen since."""
        ...

    # -- robots.txt cache ----------------------------------------------------------------
    def get_robots(self, crawl: str, origin: str) -> RobotsEntry | None: ...

    def claim_robots(self, crawl: str, origin: str, owner: str, seconds: float) -> bool:
        """Take the right to fetch ``origin``'s robots.txt for ``seconds``; False while
        another live worker holds it."""
        ...

    def put_robots(self, crawl: str, origin: str, body: str, *, owner: str, age: float) -> bool:
        """Store a copy read (``""``: no rules) by the holder of the claim, whose download
        started ``age`` seconds ago; clears the failure state and the claim. False, and
        nothing written, if ``owner`` no longer holds the claim."""
        ...

    def robots_failed(
        self, crawl: str, origin: str, retry_in: float, *, owner: str, why: str = ""
    ) -> bool:
        """Note that robots.txt could not be read (``why``: the failure, e.g. "connection
        refused"); try again in ``retry_in`` seconds. Fenced by the claim like
        :meth:`put_robots`."""
        ...

    def prune_outbox(self, crawl: str, older_than: float) -> Pruned:
        """Remove the crawl's outbox events older than ``older_than`` seconds that no
        endpoint still has to deliver, with their delivered deliveries
        (store/sql_retention.py)."""
        ...

    def retired(self, crawl: str) -> int:
        """How many of the crawl's pages are retired from passes: gone (404, 410) at
        their last three visits, until a page parsed links to one again (or a run is
        given it as a start URL, or :meth:`revive_retired`)."""
        ...

    def revive_retired(self, crawl: str) -> int:
        """Make the crawl's retired pages due again; returns how many."""
        ...

    def fold_grants(self, crawl: str) -> int:
        """Fold the crawl's lease grants that no figure needs one by one (a finished
        run's; a running one's older grants of a page it leased again) into counts per
        owner and outcome; figures stay the same. Returns how many grants were folded
        (store/sql_retention.py)."""
        ...

    def compact(self) -> tuple[int, int]:
        """SQLite: VACUUM the file (no crawl may be writing); PostgreSQL: VACUUM
        (ANALYZE) the schema's tables. Returns the bytes before and after."""
        ...

    def tend_wal(self, *, at_least: int | None = None) -> WalState | None:
        """SQLite: checkpoint the WAL and truncate it, if it holds ``at_least`` bytes,
        without waiting; say its size and whether a reader's old snapshot held it back.
        None: nothing to do (PostgreSQL: always)."""
        ...

    def waiting(self, crawl: str) -> list[Waiting]:
        """The origins whose robots.txt is failing, and the pending URLs each holds back."""
        ...

    def fetchable(self, crawl: str) -> bool:
        """Whether some URL is leased, or pending at an origin whose robots.txt is not
        failing (False: all that is left waits on unreachable origins)."""
        ...

    def release_robots(self, crawl: str, origin: str, owner: str) -> None:
        """Give a claim back without an answer (the fetch was cut short)."""
        ...

    def set_host_delay(self, crawl: str, origin: str, seconds: float) -> None:
        """Space the grants of ``origin``'s URLs by ``seconds`` for every worker (its
        robots.txt Crawl-delay) in claims that honour :class:`Politeness`."""
        ...

    # -- recrawls and the outbox (store/sql_effects.py) ---------------------------------
    def recrawl(
        self, crawl: str, *, older_than: float = 0.0, due: bool = False, force: bool = True
    ) -> Pass:
        """Put done URLs finished at least ``older_than`` seconds ago (``due``: those due
        for their next visit) back to pending, as a new pass (none begins if none is, or,
        without ``force``, while the last pass is still open)."""
        ...

    def finish_pass(self, crawl: str) -> int:
        """Once the last pass is complete, mark gone the records of the pages it fetched
        that no page yielded in it; return how many (0 while URLs are pending or leased)."""
        ...

    def last_pass_at(self, crawl: str) -> float | None:
        """When the crawl's last recrawl began (None: it has had none)."""
        ...

    def begin_pass(
        self,
        crawl: str,
        *,
        every: float | None = None,
        due: bool = False,
        early: float = 0.0,
        last: int | None = None,
    ) -> PassTurn:
        """Once the current pass is complete, begin the next when it is due (``every``
        seconds after the last began, or as soon as a page is due for its next visit,
        with those due within ``early``), one at a time across all workers, and none
        past pass ``last`` (store/sql_passes.py)."""
        ...

    def pass_figures(self, crawl: str, *, limit: int = 20) -> list[PassFigures]:
        """What the crawl's complete passes did, the last first."""
        ...

    def effect_stats(self, crawl: str) -> EffectStats: ...

    def high_water(self, run: str = "") -> HighWater:
        """Where lease grants stand now, and the time (cheap), for the run ``run``."""
        ...

    def since(self, crawl: str, mark: HighWater) -> RunFigures:
        """What the run of ``mark`` did for ``crawl`` since: the requests its workers
        made (every worker's, for a mark without a run), and the records the pages they
        committed created, changed or left gone."""
        ...

    def endpoint(self, crawl: str, url: str) -> Endpoint:
        """The webhook endpoint ``url`` of ``crawl``, added (with the whole outbox as its
        backlog) the first time."""
        ...

    def find_endpoint(self, crawl: str, url: str) -> Endpoint | None:
        """The endpoint ``url`` of ``crawl`` if it exists (never adds it)."""
        ...

    def lease_deliveries(
        self, endpoint: int, owner: str, limit: int, lease_seconds: float
    ) -> list[Delivery]: ...

    def finish_deliveries(
        self, owner: str, results: Sequence[DeliveryResult], *, disable: str | None = None
    ) -> None: ...

    def disable_endpoint(self, endpoint: int, why: str) -> None: ...

    def deliveries_due(self, endpoint: int) -> float | None:
        """Seconds until a delivery to ``endpoint`` is due (0: now; None: none open)."""
        ...

    def endpoint_deliveries(self, endpoint: int) -> dict[str, int]: ...

    def remove_endpoint(self, crawl: str, url: str) -> int:
        """Forget an endpoint and its deliveries; return how many deliveries went with it
        (-1: no such endpoint)."""
        ...

    def failed_deliveries(self, crawl: str, url: str | None = None) -> list[FailedDelivery]: ...

    def replay_deliveries(self, crawl: str, url: str | None = None) -> int: ...
