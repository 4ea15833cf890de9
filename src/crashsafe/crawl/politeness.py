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
