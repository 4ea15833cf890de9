"""The Store contract every backend implements, and the values that cross it.

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

import hashlib
import json
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol, TypeVar

Outcome = Literal["done", "retry", "failed", "skipped", "deferred"]
C = TypeVar("C", bound=type)


def pickled_as_tuple(cls: C) -> C:
    """Pickle a slotted dataclass as ``cls(*fields)``: the default goes through
    ``dataclasses.fields`` for every object, which was 4 % of a crawl's CPU (these values
    cross to the store process and back for every page)."""
    names = [f.name for f in fields(cls)]
    values = operator.attrgetter(*names)

    def __reduce__(self: Any) -> tuple[type, tuple[Any, ...]]:
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[assignment]
    return cls


#: What ``commit_pages`` answers for a page whose lease is no longer the current grant of
#: its URL (it lapsed, and was or may be granted again): nothing of the page was written.
STALE = "refused: the lease is no longer this worker's (it lapsed; stale commit)"


def canonical_json(data: Any) -> str:
    """Serialise ``data`` so equal content always gives equal text (and hash).

    NaN and the infinities are refused (``ValueError``): JSON cannot carry them.
    """
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def storable(text: str) -> str:
    """``text`` as every backend can carry it: lone surrogates (from bytes decoded with
    ``surrogateescape``, or made up by code) become the escape ``\\udc80`` (UTF-8 cannot
    carry them), NUL becomes ``\\x00`` (PostgreSQL text and JSONB cannot), so that one
    odd string can never break the transaction it is written in."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def storable_data(data: Any) -> Any:
    """``data`` with every string (keys too) made :func:`storable`."""
    if isinstance(data, str):
        return storable(data)
    if isinstance(data, dict):
        return {storable_data(k): storable_data(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [storable_data(v) for v in data]
    return data


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class NewUrl:
    """A URL to add to the frontier; ``url`` must already be canonical."""

    url: str
    depth: int = 0
    callback: str | None = None
    priority: int = 0


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class Lease:
    """A URL granted to one worker until ``expires`` (or until that worker dies)."""

    frontier_id: int
    url: str
    depth: int
    attempts: int
    callback: str | None
    grant_id: int


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class RecordRow:
    """A record ready to be stored: id computed, data serialised and hashed."""

    id: str
    source: str
    key: str
    url: str | None
    data_json: str
    content_hash: str

    @classmethod
    def build(cls, *, id: str, source: str, key: str, url: str | None, data: Any) -> RecordRow:
        """Serialise and hash ``data``; raises ``ValueError``/``TypeError`` for what JSON
        cannot carry (NaN, infinities, objects)."""
        text = canonical_json(data)
        # The common case costs one encode and two searches; odd text (lone surrogates,
        # which UTF-8 cannot carry, or NUL, which PostgreSQL cannot) is stored escaped.
        try:
            encoded = text.encode()
            keys = key + (url or "")
            odd = "\\u0000" in text or "\x00" in keys or not (keys.isascii() or keys.encode())
        except UnicodeEncodeError:
            odd = True
        if odd:
            text = canonical_json(storable_data(data))
            encoded = text.encode()
            key, url = storable(key), None if url is None else storable(url)
        digest = hashlib.sha256(encoded).hexdigest()
        return cls(id=id, source=source, key=key, url=url, data_json=text, content_hash=digest)


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class PageOutcome:
    """What became of one leased URL; committed in one transaction with its records.

    ``kind`` is ``done`` (records and links stored, URL done), ``retry`` (URL pending again
    ``retry_in`` seconds after the commit), ``failed`` (dead letter with ``error``),
    ``skipped`` (done without a fetch, e.g. robots.txt disallows it) or ``deferred``
    (pending again after ``retry_in`` without a fetch and without counting an attempt: its
    robots.txt is unreachable for now; the origin's other pending URLs are held back as
    long). ``links_skipped`` counts the malformed or unsupported links the page held.
    """

    lease: Lease
    kind: Outcome
    http_status: int | None = None
    error: str | None = None
    records: Sequence[RecordRow] = ()
    links: Sequence[NewUrl] = ()
    retry_in: float = 0.0
    links_skipped: int = 0


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as read back from the store."""

    crawl: str
    id: str
    source: str
    key: str
    url: str | None
    version: int
    first_seen: float
    last_changed: float
    data: Any


@dataclass(frozen=True, slots=True)
class FailedUrl:
    """A URL in the dead letter: it failed ``attempts`` times, last with ``error``."""

    crawl: str
    url: str
    attempts: int
    http_status: int | None
    error: str | None
    failed_at: float | None


@dataclass(frozen=True, slots=True)
class CrawlStats:
    """Counts for one crawl, every one computed from stored rows.

    ``stale`` counts page commits refused because their lease had been granted again
    (each one a repeated request); ``links_skipped`` the malformed or unsupported links
    pages held.
    """

    crawl: str
    pending: int = 0
    leased: int = 0
    done: int = 0
    failed: int = 0
    records: int = 0
    lease_grants: int = 0
    requests: int = 0
    retries: int = 0
    repeated: int = 0
    stale: int = 0
    links_skipped: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def known(self) -> int:
        return self.pending + self.leased + self.done + self.failed

    @property
    def requests_per_record(self) -> float | None:
        return self.requests / self.records if self.records else None


@dataclass(frozen=True, slots=True)
class RobotsEntry:
    """What the store knows of one origin's robots.txt, times in seconds from now
    (``age``: seconds ago).

    ``body`` is the last copy read (None: never read; ``""``: no rules), ``age`` how long
    ago its download started; while the file is unreachable ``failing_for`` says for how
    long, ``retry_in`` when to try again (may be negative: due). ``claimed_for`` is how
    long another worker's claim to fetch it still runs (None: not claimed).
    """

    body: str | None
    age: float | None
    failing_for: float | None
    failures: int
    retry_in: float | None
    claimed_for: float | None


@dataclass(frozen=True, slots=True)
class Due:
    """Whether a crawl still has open work, and in how many seconds some can next be
    leased (0: now; None: no open work)."""

    open: bool
    wait: float | None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds before attempt n + 1 of a URL: ``base * 2**(n - 1)``, at most ``cap``."""

    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.base * 2.0 ** (max(attempt, 1) - 1)))


@dataclass(frozen=True, slots=True)
class Politeness:
    """What a claim honours for all workers together: at most ``per_host`` leases per
    origin (None: no limit but each worker's own), and ``delay`` seconds between two
    grants for one origin (an origin's robots.txt Crawl-delay wins when larger)."""

    per_host: int | None = None
    delay: float = 0.0

    @property
    def active(self) -> bool:
        return self.per_host is not None or self.delay > 0


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker that registered with the store: alive while its liveness lock is held.

    ``leases`` counts the URLs it holds now, ``pages`` the pages it committed (done,
    retried or failed), both computed from rows.
    """

    owner: str
    crawl: str
    host: str
    pid: int
    started_at: float
    alive: bool
    leases: int
    pages: int


class Store(Protocol):
    """Durable frontier, records and lease history for any number of crawls."""

    url: str

    def close(self) -> None: ...

    # -- workers -------------------------------------------------------------------------
    def register_worker(self, crawl: str = "", *, pid: int | None = None) -> str:
        """Take a liveness lock that dies with this process (or its database session);
        return the owner id. ``crawl`` and ``pid`` (the crawl's process, which may not
        be the store's: default this one) are what :meth:`workers` shows."""
        ...

    def unregister_worker(self) -> None: ...

    def reclaim_dead_workers(self, crawl: str, *, backoff: Backoff | None = None) -> int:
        """Put back to pending the leases of workers whose liveness lock is free; each
        counts an attempt (it may have fetched). A URL tried before waits out ``backoff``
        for its attempts so far, so that in a crash loop the URLs a dying worker held are
        not the first its restart takes again; one tried for the first time is due at
        once."""
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

    # -- reading -------------------------------------------------------------------------
    def crawls(self) -> list[str]: ...

    def stats(self, crawl: str) -> CrawlStats: ...

    def failed(self, crawl: str | None = None) -> list[FailedUrl]: ...

    def retry_failed(self, crawl: str | None = None) -> int: ...

    def iter_records(
        self, crawl: str | None = None, *, since: float = 0.0
    ) -> Iterator[StoredRecord]: ...

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

    def robots_failed(self, crawl: str, origin: str, retry_in: float, *, owner: str) -> bool:
        """Note that robots.txt could not be read; try again in ``retry_in`` seconds.
        Fenced by the claim like :meth:`put_robots`."""
        ...

    def release_robots(self, crawl: str, origin: str, owner: str) -> None:
        """Give a claim back without an answer (the fetch was cut short)."""
        ...

    def set_host_delay(self, crawl: str, origin: str, seconds: float) -> None:
        """Space the grants of ``origin``'s URLs by ``seconds`` for every worker (its
        robots.txt Crawl-delay) in claims that honour :class:`Politeness`."""
        ...
