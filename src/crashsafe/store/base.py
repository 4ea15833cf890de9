"""The Store contract every backend implements, and the values that cross it.

A store is synchronous and used from one thread at a time; the crawl engine runs it in a
child process or a dedicated thread (``store/process.py``) so the event loop never waits
on the disk. Backends keep their SQL in
``store/sql/<dialect>/`` and pass the same contract suite (``tests/contract``).
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Protocol, TypeVar

Outcome = Literal["done", "retry", "failed", "skipped"]
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


def canonical_json(data: Any) -> str:
    """Serialise ``data`` so equal content always gives equal text (and hash)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


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
        text = canonical_json(data)
        digest = hashlib.sha256(text.encode()).hexdigest()
        return cls(id=id, source=source, key=key, url=url, data_json=text, content_hash=digest)


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class PageOutcome:
    """What became of one leased URL; committed in one transaction with its records.

    ``kind`` is ``done`` (records and links stored, URL done), ``retry`` (URL pending again
    at ``next_attempt_at``), ``failed`` (dead letter with ``error``) or ``skipped`` (done
    without a fetch, e.g. robots.txt disallows it).
    """

    lease: Lease
    kind: Outcome
    http_status: int | None = None
    error: str | None = None
    records: Sequence[RecordRow] = ()
    links: Sequence[NewUrl] = ()
    next_attempt_at: float = 0.0


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
    """Counts for one crawl, every one computed from stored rows."""

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
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def known(self) -> int:
        return self.pending + self.leased + self.done + self.failed

    @property
    def requests_per_record(self) -> float | None:
        return self.requests / self.records if self.records else None


@dataclass(frozen=True, slots=True)
class Due:
    """Whether a crawl still has open work, and when some can next be leased."""

    open: bool
    next_at: float | None


class Store(Protocol):
    """Durable frontier, records and lease history for any number of crawls."""

    url: str

    def close(self) -> None: ...

    # -- workers -------------------------------------------------------------------------
    def register_worker(self) -> str:
        """Take a liveness lock that dies with this process; return the owner id."""
        ...

    def unregister_worker(self) -> None: ...

    def reclaim_dead_workers(self, crawl: str) -> int:
        """Put back to pending the leases of workers whose liveness lock is free."""
        ...

    # -- frontier ------------------------------------------------------------------------
    def enqueue(self, crawl: str, urls: Iterable[NewUrl]) -> int:
        """Add URLs; known ones are left as they are. Return how many were new."""
        ...

    def lease(self, crawl: str, owner: str, limit: int, lease_seconds: float) -> list[Lease]:
        """Grant up to ``limit`` due URLs to ``owner`` (expired leases count as due)."""
        ...

    def renew(self, crawl: str, owner: str, lease_seconds: float) -> int: ...

    def release(self, crawl: str, leases: Iterable[tuple[Lease, bool]]) -> None:
        """Give leases back unfinished; the flag says whether a request was already made."""
        ...

    def commit_pages(self, crawl: str, outcomes: Sequence[PageOutcome]) -> list[str | None]:
        """Commit each page whole or not at all; return per page None or the error."""
        ...

    def commit_and_lease(
        self,
        crawl: str,
        outcomes: Sequence[PageOutcome],
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
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
    def get_robots(self, crawl: str, origin: str, *, max_age: float) -> str | None: ...

    def put_robots(self, crawl: str, origin: str, body: str) -> None: ...
