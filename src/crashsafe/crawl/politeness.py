"""Being a good citizen: per-host concurrency and delay, and robots.txt.

robots.txt follows RFC 9309 (https://www.rfc-editor.org/rfc/rfc9309): read once per origin
by one worker at a time and cached in the database for a day (section 2.4), so other
workers and a restart do not fetch it again; at most 500 KiB of it is parsed (2.5); at
most 5 redirects are followed, more means "unavailable" (2.3.1.2); a 4xx means no rules
(2.3.1.3); a 5xx, 429 or network error means "disallow everything for now" (2.3.1.4): the
origin's pages wait, with backoff, without counting an attempt. Unreachable for longer
than ``robots_unreachable_grace`` (RFC: "a reasonably long period of time, for example 30
days"), the last copy read is used, or no rules if there is none.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from protego import Protego

from crashsafe.crawl.fetch_errors import PermanentFetchError, TransientFetchError
from crashsafe.store import RobotsEntry

ROBOTS_MAX_AGE = 24 * 3600.0  # RFC 9309 2.4: a cached copy for at most 24 hours
ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309 2.5: parse at least 500 KiB
ROBOTS_MAX_REDIRECTS = 5  # RFC 9309 2.3.1.2: follow at least five redirects
CLAIM_POLL = 0.2  # seconds between looks while another worker fetches a robots.txt


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class HostSlots:
    """At most ``limit`` requests in flight per host, starts spaced by ``delay`` seconds."""

    def __init__(self, limit: int, delay: float) -> None:
        self.limit = limit
        self.delay = delay
        self._sems: dict[str, asyncio.Semaphore] = {}
        self._next_start: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def needed(self, concurrency: int, delay: float | None) -> bool:
        """False when no host could ever wait: no delay, limit at least the concurrency."""
        return self.limit < concurrency or self.delay > 0 or bool(delay)

    @asynccontextmanager
    async def slot(self, host: str, delay: float | None = None) -> AsyncIterator[None]:
        sem = self._sems.get(host)
        if sem is None:
            sem = self._sems[host] = asyncio.Semaphore(self.limit)
        async with sem:
            wait = max(self.delay, delay or 0.0)
            if wait > 0:
                lock = self._locks.setdefault(host, asyncio.Lock())
                async with lock:
                    now = time.monotonic()
                    start = max(now, self._next_start.get(host, 0.0))
                    self._next_start[host] = start + wait
                    if start > now:
                        await asyncio.sleep(start - now)
            yield


class RobotsUnavailable(Exception):
    """robots.txt cannot be read for now: the origin's pages wait until ``retry_at``."""

    def __init__(self, origin: str, retry_at: float, reason: str) -> None:
        super().__init__(f"robots.txt of {origin} unreachable ({reason}); trying again later")
        self.retry_at = retry_at


@dataclass(frozen=True, slots=True)
class RobotsStore:
    """How :class:`Robots` reaches the store, for one crawl."""

    load: Callable[[str], Awaitable[RobotsEntry | None]]
    claim: Callable[[str], Awaitable[bool]]
    save: Callable[[str, str], Awaitable[None]]
    failed: Callable[[str, float], Awaitable[None]]


class Robots:
    """robots.txt rules per origin, parsed by Protego (policy: the module docstring).

    Args:
        store: the shared cache and the one-fetcher-per-origin claim.
        download: returns ``(status, body)`` for a URL (body cut at ``ROBOTS_MAX_BYTES``,
            at most ``ROBOTS_MAX_REDIRECTS`` followed); raises fetch errors.
        user_agent: the agent whose rules apply.
        backoff: seconds to wait after the n-th failure in a row.
        unreachable_grace: seconds of failures after which the rules fall back to the
            last copy read, or to none.
        clock: wall-clock time (shared with other workers through the store).
    """

    def __init__(
        self,
        *,
        store: RobotsStore,
        download: Callable[[str], Awaitable[tuple[int, bytes]]],
        user_agent: str,
        backoff: Callable[[int], float],
        unreachable_grace: float = 30 * 24 * 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store, self._download = store, download
        self.user_agent = user_agent
        self._backoff = backoff
        self._grace = unreachable_grace
        self._clock = clock
        self._parsed: dict[str, tuple[Protego, float]] = {}  # rules, valid until
        self._unreachable: dict[str, RobotsUnavailable] = {}
        self._pending: dict[str, asyncio.Future[Protego]] = {}

    async def _rules(self, origin: str) -> Protego:
        cached = self._parsed.get(origin)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        known = self._unreachable.get(origin)
        if known is not None and known.retry_at > self._clock():
            raise known
        if origin in self._pending:
            return await asyncio.shield(self._pending[origin])
        future: asyncio.Future[Protego] = asyncio.get_running_loop().create_future()
        self._pending[origin] = future
        try:
            rules = await self._resolve(origin)
            future.set_result(rules)
            return rules
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                future.cancel()
            else:
                future.set_exception(exc)
                future.exception()  # mark retrieved: waiters re-raise it themselves
            raise
        finally:
            del self._pending[origin]

    def _use(self, origin: str, body: str, until: float) -> Protego:
        rules = Protego.parse(body)
        self._parsed[origin] = (rules, until)
        self._unreachable.pop(origin, None)
        return rules

    async def _resolve(self, origin: str) -> Protego:
        while True:
            entry = await self._store.load(origin)
            now = self._clock()
            if entry is not None and entry.failing_since is None and entry.body is not None:
                fetched = entry.fetched_at or 0.0
                if fetched + ROBOTS_MAX_AGE > now:
                    return self._use(origin, entry.body, fetched + ROBOTS_MAX_AGE)
            failing = entry is not None and entry.failing_since is not None
            if failing and entry is not None and (entry.retry_at or 0.0) > now:
                return self._unreachable_rules(origin, entry, now)
            if await self._store.claim(origin):
                return await self._fetch(origin, entry)
            # Another worker is fetching it: wait for its answer (its claim lapses if it
            # dies, and then this worker takes over).
            await asyncio.sleep(CLAIM_POLL)

    def _unreachable_rules(self, origin: str, entry: RobotsEntry, now: float) -> Protego:
        since = entry.failing_since if entry.failing_since is not None else now
        return self._wait_or_fall_back(
            origin, entry.body, since, entry.retry_at or now, f"failing for {now - since:.0f}s"
        )

    def _wait_or_fall_back(
        self, origin: str, body: str | None, since: float, retry_at: float, reason: str
    ) -> Protego:
        if self._clock() - since >= self._grace:
            return self._use(origin, body or "", retry_at)
        error = RobotsUnavailable(origin, retry_at, reason)
        self._unreachable[origin] = error
        raise error

    async def _fetch(self, origin: str, entry: RobotsEntry | None) -> Protego:
        try:
            status, raw = await self._download(origin + "/robots.txt")
        except TransientFetchError as exc:
            return await self._failed(origin, entry, str(exc))
        except PermanentFetchError:
            # Too many redirects, a URL that cannot be requested: "unavailable", no rules.
            status, raw = 404, b""
        if status == 429 or status >= 500:
            return await self._failed(origin, entry, f"HTTP {status}")
        body = raw.decode("utf-8", "replace") if 200 <= status < 300 else ""
        await self._store.save(origin, body)
        return self._use(origin, body, self._clock() + ROBOTS_MAX_AGE)

    async def _failed(self, origin: str, entry: RobotsEntry | None, reason: str) -> Protego:
        now = self._clock()
        failures = (entry.failures if entry is not None else 0) + 1
        retry_at = now + self._backoff(failures)
        await self._store.failed(origin, retry_at)
        since = now
        if entry is not None and entry.failing_since is not None:
            since = entry.failing_since
        body = entry.body if entry is not None else None
        return self._wait_or_fall_back(origin, body, since, retry_at, reason)

    def check_loaded(self, url: str) -> tuple[bool, float | None] | None:
        """What :meth:`check` answers, without awaiting; None if the origin's rules are
        not loaded (or are out of date)."""
        cached = self._parsed.get(origin_of(url))
        if cached is None or cached[1] <= self._clock():
            return None
        return self._verdict(cached[0], url)

    async def check(self, url: str) -> tuple[bool, float | None]:
        """Whether ``url`` may be fetched, and the origin's Crawl-delay (None: none).

        Raises :class:`RobotsUnavailable` while the origin's robots.txt is unreachable.
        """
        return self._verdict(await self._rules(origin_of(url)), url)

    def _verdict(self, rules: Protego, url: str) -> tuple[bool, float | None]:
        delay = rules.crawl_delay(self.user_agent)
        return bool(rules.can_fetch(url, self.user_agent)), None if delay is None else float(delay)
