"""robots.txt, as RFC 9309 specifies.

robots.txt follows RFC 9309 (https://www.rfc-editor.org/rfc/rfc9309): read once per origin
by one worker at a time and cached in the database for a day (section 2.4), so other
workers and a restart do not fetch it again; at most 500 KiB of it is parsed (2.5); at
most 5 redirects are followed, more means "unavailable" (2.3.1.2); a 4xx means no rules
(2.3.1.3); a 5xx, 429 or network error means "disallow everything for now" (2.3.1.4): the
origin's pages wait, with backoff, without counting an attempt. A TLS handshake that fails
(an invalid certificate, a port that speaks plain HTTP) is no outage: the pages that asked
fail an attempt with it, and end in the dead letter. Unreachable for longer
than ``robots_unreachable_grace`` (RFC: "a reasonably long period of time, for example 30
days"), the last copy read is used, or no rules if there is none.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from protego import Protego

from crashsafe.crawl.fetch_errors import PermanentFetchError, TLSFetchError, TransientFetchError
from crashsafe.crawl.politeness import origin_of
from crashsafe.store import RobotsEntry, Store
from crashsafe.store.process import StoreCall

ROBOTS_MAX_AGE = 24 * 3600.0  # RFC 9309 2.4: a cached copy for at most 24 hours
ROBOTS_MAX_BYTES = 500 * 1024  # RFC 9309 2.5: parse at least 500 KiB
ROBOTS_MAX_REDIRECTS = 5  # RFC 9309 2.3.1.2: follow at least five redirects
CLAIM_POLL = 0.2  # seconds between looks while another worker fetches a robots.txt
#: origins whose parsed rules (or failure) a worker keeps in memory; beyond, the oldest
#: half goes (read again from the store when met again): a broad crawl meets millions
ORIGINS_KEPT = 10_000


def _room(cache: dict[str, Any], origin: str, kept: int) -> None:
    """Make room for ``origin``'s entry: the oldest half goes once ``kept`` are held."""
    if len(cache) >= kept and origin not in cache:
        for oldest in list(itertools.islice(cache, len(cache) // 2 + 1)):
            del cache[oldest]


class RobotsUnavailable(Exception):
    """robots.txt cannot be read for now: the origin's pages wait until ``retry_at``."""

    def __init__(self, origin: str, retry_at: float, reason: str) -> None:
        super().__init__(f"robots.txt of {origin} unreachable ({reason}); trying again later")
        self.retry_at = retry_at


@dataclass(frozen=True, slots=True)
class RobotsStore:
    """How :class:`Robots` reaches the store, for one crawl and one worker (the claim's
    owner is bound in). ``save`` and ``failed`` answer False when the claim was lost."""

    load: Callable[[str], Awaitable[RobotsEntry | None]]
    claim: Callable[[str], Awaitable[bool]]
    save: Callable[[str, str, float], Awaitable[bool]]  # origin, body, age of the copy
    failed: Callable[[str, float, str], Awaitable[bool]]  # origin, seconds to next try, why
    release: Callable[[str], Awaitable[None]]
    space: Callable[[str, float], Awaitable[None]]  # origin, Crawl-delay for all workers

    @classmethod
    def of(
        cls, call: StoreCall, store: Store, crawl: str, owner: str, *, claim_seconds: float
    ) -> RobotsStore:
        """``store``'s robots.txt methods for ``crawl`` and ``owner``, each run through
        ``call`` (the crawl's way of running a store method off its event loop)."""

        async def load(origin: str) -> RobotsEntry | None:
            return await call(store.get_robots, crawl, origin)

        async def claim(origin: str) -> bool:
            return await call(store.claim_robots, crawl, origin, owner, claim_seconds)

        async def save(origin: str, body: str, age: float) -> bool:
            return await call(store.put_robots, crawl, origin, body, owner=owner, age=age)

        async def failed(origin: str, retry_in: float, why: str) -> bool:
            return await call(store.robots_failed, crawl, origin, retry_in, owner=owner, why=why)

        async def release(origin: str) -> None:
            await call(store.release_robots, crawl, origin, owner)

        async def space(origin: str, delay: float) -> None:
            await call(store.set_host_delay, crawl, origin, delay)

        return cls(load=load, claim=claim, save=save, failed=failed, release=release, space=space)


def _settled(entry: RobotsEntry | None) -> bool:
    """Whether ``entry`` answers without a download: a copy younger than a day, or a
    failure whose retry is not due yet."""
    if entry is None:
        return False
    if entry.failing_for is None:
        return entry.body is not None and (entry.age or 0.0) < ROBOTS_MAX_AGE
    return (entry.retry_in or 0) > 0


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
        clock: this worker's time (the store answers in durations, read against it).
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
        self.clock = clock
        self.kept = ORIGINS_KEPT
        self._parsed: dict[str, tuple[Protego, float]] = {}  # rules, valid until
        self._unreachable: dict[str, tuple[float, str]] = {}  # retry at, reason
        self._pending: dict[str, asyncio.Task[Protego]] = {}

    async def _rules(self, origin: str) -> Protego:
        cached = self._parsed.get(origin)
        if cached is not None and cached[1] > self.clock():
            return cached[0]
        known = self._unreachable.get(origin)
        if known is not None and known[0] > self.clock():
            raise RobotsUnavailable(origin, *known)  # a new one: a reused one grows its traceback
        task = self._pending.get(origin)
        if task is None:
            # A task of its own, owned by no page: a page cancelled while it waits (a lost
            # lease, a stop) must not cancel the answer the origin's other pages wait for.
            task = asyncio.ensure_future(self._resolve(origin))
            self._pending[origin] = task
            task.add_done_callback(functools.partial(self._resolved, origin))
        return await asyncio.shield(task)

    def _resolved(self, origin: str, task: asyncio.Task[Protego]) -> None:
        if self._pending.get(origin) is task:
            del self._pending[origin]
        if not task.cancelled():
            task.exception()  # retrieved here: every waiter gets it from the task itself

    async def close(self) -> None:
        """Stop the robots.txt downloads still running (the crawl is over)."""
        tasks = list(self._pending.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _use(self, origin: str, body: str, until: float) -> Protego:
        rules = Protego.parse(body)
        _room(self._parsed, origin, self.kept)
        self._parsed[origin] = (rules, until)
        self._unreachable.pop(origin, None)
        return rules

    async def _resolve(self, origin: str) -> Protego:
        while True:
            entry = await self._store.load(origin)
            now = self.clock()  # the store's times are durations: read them against it
            if entry is not None and entry.failing_for is None and entry.body is not None:
                age = entry.age or 0.0
                if age < ROBOTS_MAX_AGE:
                    return self._use(origin, entry.body, now - age + ROBOTS_MAX_AGE)
            if entry is not None and entry.failing_for is not None and (entry.retry_in or 0) > 0:
                return self._unreachable_rules(origin, entry, now)
            if await self._store.claim(origin):
                # The load above and the claim are two transactions: the claim's last
                # holder may have saved its copy (or noted a failure) in between, which
                # freed the claim. Look again under the claim before fetching: no save
                # can land after it (saves are fenced by the claim).
                entry = await self._store.load(origin)
                if not _settled(entry):
                    return await self._fetch(origin, entry)
                await self._store.release(origin)
                continue
            # Another worker is fetching it: wait for its answer (its claim lapses if it
            # dies, and then this worker takes over).
            await asyncio.sleep(CLAIM_POLL)

    def _unreachable_rules(self, origin: str, entry: RobotsEntry, now: float) -> Protego:
        since = now - (entry.failing_for or 0.0)
        return self._wait_or_fall_back(
            origin,
            entry.body,
            since,
            now + (entry.retry_in or 0.0),
            f"failing for {now - since:.0f}s",
        )

    def _wait_or_fall_back(
        self, origin: str, body: str | None, since: float, retry_at: float, reason: str
    ) -> Protego:
        if self.clock() - since >= self._grace:
            return self._use(origin, body or "", retry_at)
        _room(self._unreachable, origin, self.kept)
        self._unreachable[origin] = (retry_at, reason)
        raise RobotsUnavailable(origin, retry_at, reason)

    async def _fetch(self, origin: str, entry: RobotsEntry | None) -> Protego:
        started = self.clock()
        try:
            status, raw = await self._download(origin + "/robots.txt")
        except TLSFetchError as exc:
            # No outage to wait out (a certificate, a port that speaks plain HTTP): the
            # pages that asked fail their attempt with it, and end in the dead letter.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._store.release(origin))
            raise TLSFetchError(f"robots.txt of {origin}: {exc}") from None
        except TransientFetchError as exc:
            return await self._failed(origin, entry, str(exc))
        except PermanentFetchError:
            # Too many redirects, one off the allow-list, a URL that cannot be requested:
            # "unavailable", no rules.
            status, raw = 404, b""
        except BaseException:
            # Cut short (the crawl stops, a bug of ours): give the claim back so another
            # worker need not wait for it to lapse.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._store.release(origin))
            raise
        if status == 429 or status >= 500:
            return await self._failed(origin, entry, f"HTTP {status}")
        body = raw.decode("utf-8", "replace") if 200 <= status < 300 else ""
        age = self.clock() - started  # the copy is as old as its download's start
        if await self._store.save(origin, body, age):  # (False: another copy is newer)
            rules = self._use(origin, body, started + ROBOTS_MAX_AGE)
            delay = rules.crawl_delay(self.user_agent)
            if delay:  # every worker's claims space this origin's grants from now on
                await self._store.space(origin, float(delay))
            return rules
        return self._use(origin, body, started + ROBOTS_MAX_AGE)

    async def _failed(self, origin: str, entry: RobotsEntry | None, reason: str) -> Protego:
        now = self.clock()
        failures = (entry.failures if entry is not None else 0) + 1
        retry_in = self._backoff(failures)
        await self._store.failed(origin, retry_in, reason)
        since = now
        if entry is not None and entry.failing_for is not None:
            since = now - entry.failing_for
        body = entry.body if entry is not None else None
        return self._wait_or_fall_back(origin, body, since, now + retry_in, reason)

    def check_loaded(self, url: str) -> tuple[bool, float | None] | None:
        """What :meth:`check` answers, without awaiting; None if the origin's rules are
        not loaded (or are out of date)."""
        cached = self._parsed.get(origin_of(url))
        if cached is None or cached[1] <= self.clock():
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
