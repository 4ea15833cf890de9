"""Being a good citizen: per-host concurrency and delay (robots.txt: ``robots.py``)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

#: The scheme and host of a plain http(s) URL (lower-case scheme, no brackets, tabs or
#: line breaks): what urlsplit would give it, found without splitting the whole URL.
_ORIGIN = re.compile(r"https?://[^/?#\[\]\t\r\n]*")


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (as urlsplit reads it)."""
    plain = _ORIGIN.match(url)
    if plain is not None and (plain.end() == len(url) or url[plain.end()] in "/?#"):
        origin = plain.group()
        if origin.isascii():  # (urlsplit refuses some other hosts: it says which)
            return origin
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


#: hosts whose slots are kept before the idle ones are dropped (a broad crawl meets
#: millions of hosts: their state must not stay for the life of the crawl)
HOSTS_KEPT = 10_000


class HostSlots:
    """At most ``limit`` requests in flight per host, starts spaced by ``delay`` seconds.

    A host's state is dropped once it is idle (nothing in flight or waiting, its next
    start passed) and more than ``kept`` hosts have state: a host met again starts
    afresh, as it would have anyway."""

    def __init__(self, limit: int, delay: float, kept: int = HOSTS_KEPT) -> None:
        self.limit = limit
        self.delay = delay
        self._sems: dict[str, asyncio.Semaphore] = {}
        self._next_start: dict[str, float] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}  # requests in flight or waiting, per host
        self._kept = self._sweep_at = kept

    def needed(self, concurrency: int, delay: float | None) -> bool:
        """False when no host could ever wait: no delay, limit at least the concurrency."""
        return self.limit < concurrency or self.delay > 0 or bool(delay)

    def hosts(self) -> int:
        """How many hosts have state now."""
        return len(self._sems)

    @asynccontextmanager
    async def slot(self, host: str, delay: float | None = None) -> AsyncIterator[None]:
        sem = self._sems.get(host)
        if sem is None:
            if len(self._sems) >= self._sweep_at:
                self._sweep()
            sem = self._sems[host] = asyncio.Semaphore(self.limit)
        self._users[host] = self._users.get(host, 0) + 1
        try:
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
        finally:
            self._users[host] -= 1

    def _sweep(self) -> None:
        """Drop the state of idle hosts; sweep again once as many hosts again have state
        (a sweep costs a look at each: never one per new host)."""
        now = time.monotonic()
        for host in [h for h, n in self._users.items() if n == 0]:
            if self._next_start.get(host, 0.0) <= now:
                del self._sems[host], self._users[host]
                self._next_start.pop(host, None)
                self._locks.pop(host, None)
        self._sweep_at = max(self._kept, 2 * len(self._sems))
