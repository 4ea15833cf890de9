"""Being a good citizen: per-host concurrency and delay, and robots.txt.

robots.txt is fetched once per origin and cached in the database (a day), so a restart
does not fetch it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

from protego import Protego

from crashsafe.crawl.fetch_errors import TransientFetchError

ROBOTS_MAX_AGE = 24 * 3600.0


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


class Robots:
    """robots.txt rules per origin, parsed by Protego.

    Args:
        load: returns a cached body or None.
        save: stores a fetched body.
        download: returns ``(status, body)`` for a URL; raises on network errors.
        user_agent: the agent whose rules apply.
    """

    def __init__(
        self,
        *,
        load: Callable[[str], Awaitable[str | None]],
        save: Callable[[str, str], Awaitable[None]],
        download: Callable[[str], Awaitable[tuple[int, str]]],
        user_agent: str,
    ) -> None:
        self._load, self._save, self._download = load, save, download
        self.user_agent = user_agent
        self._parsed: dict[str, Protego] = {}
        self._pending: dict[str, asyncio.Future[Protego]] = {}

    async def _rules(self, origin: str) -> Protego:
        if origin in self._parsed:
            return self._parsed[origin]
        if origin in self._pending:
            return await asyncio.shield(self._pending[origin])
        future: asyncio.Future[Protego] = asyncio.get_running_loop().create_future()
        self._pending[origin] = future
        try:
            body = await self._load(origin)
            if body is None:
                status, text = await self._download(origin + "/robots.txt")
                if status >= 500 or status == 429:
                    # RFC 9309 2.3.1.4: unreachable means do not crawl yet; retry later.
                    raise TransientFetchError(f"robots.txt answered {status}")
                body = text if 200 <= status < 300 else ""  # 4xx: no rules
                await self._save(origin, body)
            rules = Protego.parse(body)
            self._parsed[origin] = rules
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

    def check_loaded(self, url: str) -> tuple[bool, float | None] | None:
        """What :meth:`check` answers, without awaiting; None if the origin's rules are
        not loaded yet."""
        rules = self._parsed.get(origin_of(url))
        return None if rules is None else self._verdict(rules, url)

    async def check(self, url: str) -> tuple[bool, float | None]:
        """Whether ``url`` may be fetched, and the origin's Crawl-delay (None: none)."""
        origin = origin_of(url)
        return self._verdict(self._parsed.get(origin) or await self._rules(origin), url)

    def _verdict(self, rules: Protego, url: str) -> tuple[bool, float | None]:
        delay = rules.crawl_delay(self.user_agent)
        return bool(rules.can_fetch(url, self.user_agent)), None if delay is None else float(delay)
