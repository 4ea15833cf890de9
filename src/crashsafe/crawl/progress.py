"""What a running crawl says about itself: a live line on a terminal, a log line at a
steady interval off one (as Scrapy's LogStats), both with what the crawl waits for.

Figures are read from the store (computed from rows): once a second for the live line,
every ``log_interval`` seconds for the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from crashsafe.logs import fields
from crashsafe.store import CrawlStats, Store, Waiting

REFRESH = 1.0
logger = logging.getLogger("crashsafe.crawl")


def clock(ts: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(ts))


def waiting_text(waiting: Sequence[Waiting]) -> str:
    """``1 page waits for robots.txt of http://h:8009 (connection refused since 06:31
    UTC, next try 06:33 UTC)``, and how many other origins wait."""
    held = [w for w in waiting if w.pages]
    if not held:
        return ""
    w = max(held, key=lambda x: x.pages)
    pages = "1 page waits" if w.pages == 1 else f"{w.pages:,} pages wait"
    next_try = "" if w.next_try is None else f", next try {clock(w.next_try)}"
    text = (
        f"{pages} for robots.txt of {w.origin} ({w.why or 'unreachable'} since "
        f"{clock(w.since)}{next_try})"
    )
    if len(held) > 1:
        others = sum(x.pages for x in held) - w.pages
        text += f", and {others:,} more at {len(held) - 1} other origin(s)"
    return text


def figures(stats: CrawlStats, rate: float | None) -> dict[str, Any]:
    """A progress line's fields (for ``--log-format json``)."""
    return {
        "crawl": stats.crawl,
        "pages_done": stats.done + stats.failed,
        "pages_known": stats.known,
        "pages_per_second": None if rate is None else round(rate, 1),
        "records": stats.records,
        "leased": stats.leased,
        "retries": stats.retries,
        "failed": stats.failed,
        "repeated": stats.repeated,
    }


def log_line(stats: CrawlStats, rate: float | None, waiting: list[Waiting]) -> str:
    """``demo-shop: 1,234/10,100 pages (412/s), 1,200 records, 0 failed, 3 retries``."""
    speed = "" if rate is None else f" ({rate:,.0f}/s)"
    line = (
        f"{stats.crawl}: {stats.done + stats.failed:,}/{stats.known:,} pages{speed}, "
        f"{stats.records:,} records, {stats.failed:,} failed, {stats.retries:,} retries"
    )
    if stats.repeated:
        line += f", {stats.repeated:,} repeated"
    wait = waiting_text(waiting)
    return f"{line}; {wait}" if wait else line


def progress_line(stats: CrawlStats, rate: float | None, waiting: Sequence[Waiting] = ()) -> Any:
    from rich.text import Text

    line = Text()
    line.append(f"{stats.crawl} ", style="bold")
    line.append(f"pages {stats.done + stats.failed:,}/{stats.known:,}  ")
    if rate is not None:
        line.append(f"{rate:,.0f}/s  ")
    line.append(f"records {stats.records:,}  ", style="green")
    line.append(f"leased {stats.leased}  retries {stats.retries}  ")
    line.append(f"failed {stats.failed}", style="red" if stats.failed else "")
    if stats.repeated:
        line.append(f"  repeated {stats.repeated}", style="yellow")
    if stats.stale:
        line.append(f"  stale refused {stats.stale}", style="yellow")
    wait = waiting_text(waiting)
    if wait:
        line.append(f"  waiting: {wait}", style="yellow")
    return line


class _Rate:
    """Pages per second over the last samples."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.samples: list[tuple[float, int]] = []

    def add(self, stats: CrawlStats) -> float | None:
        now = time.monotonic()
        self.samples = [*self.samples[-(self.keep - 1) :], (now, stats.done + stats.failed)]
        first, last = self.samples[0], self.samples[-1]
        if len(self.samples) < 2 or last[0] <= first[0]:
            return None
        return (last[1] - first[1]) / (last[0] - first[0])


class Progress:
    """The live line (``live``: on a terminal, refreshed every second) or a log line at
    ``crashsafe.crawl`` INFO every ``interval`` seconds; and the last line at the end."""

    def __init__(
        self,
        crawl: str,
        store: Store,
        call: Callable[..., Awaitable[Any]],
        *,
        live: bool,
        interval: float = 30.0,
    ) -> None:
        self.crawl, self.store, self.call = crawl, store, call
        self.live = live
        self.interval = REFRESH if live else interval
        self._live: Any = None
        self._task: asyncio.Task[None] | None = None
        self._rate = _Rate(10 if live else 2)

    def start(self) -> None:
        if self.live:
            from rich.console import Console
            from rich.live import Live
            from rich.text import Text

            console = Console(stderr=True)
            self._live = Live(Text(f"{self.crawl}: starting..."), console=console, transient=True)
            self._live.start()
        self._task = asyncio.create_task(self._refresh())

    async def _sample(self) -> tuple[CrawlStats, float | None, list[Waiting]]:
        """The figures; if only what the crawl waits for cannot be read, the figures
        without it, saying why."""
        stats: CrawlStats = await self.call(self.store.stats, self.crawl)
        try:
            waiting: list[Waiting] = await self.call(self.store.waiting, self.crawl)
        except Exception as exc:
            logger.warning("progress: reading what the crawl waits for failed (%s)", exc)
            waiting = []
        return stats, self._rate.add(stats), waiting

    async def _refresh(self) -> None:
        if not self.live:
            await self._log()
            return
        while True:
            try:
                stats, rate, waiting = await self._sample()
            except Exception as exc:  # the store is busy or gone: say so, try again later
                logger.warning("progress: reading the figures failed (%s)", exc)
            else:
                self._live.update(progress_line(stats, rate, waiting))
            await asyncio.sleep(self.interval)

    async def _log(self) -> None:
        """A line a second in (the crawl has started: a log under a service manager is not
        silent until the first interval; a run that ends or fails at once says only
        that), then every ``interval`` seconds, and at once whenever an origin starts
        holding pages back (robots.txt unreachable): what the crawl waits for is said
        within a second or two, not at the next interval. In between, only the waiting
        origins are read (one small query a second)."""
        await asyncio.sleep(REFRESH)
        last = -float("inf")
        said: set[str] = set()  # the origins a line said (or tried to say) wait
        while True:
            news: set[str] = set()
            if time.monotonic() - last < self.interval:
                try:
                    waiting = await self.call(self.store.waiting, self.crawl)
                except Exception:  # (nothing new, then: the next full line says why)
                    await asyncio.sleep(REFRESH)
                    continue
                now_waiting = {w.origin for w in waiting if w.pages}
                said &= now_waiting  # (one that stopped waiting and starts again: news)
                news = now_waiting - said
                if not news:
                    await asyncio.sleep(REFRESH)
                    continue
            last = time.monotonic()  # (a failing store: one warning an interval)
            try:
                stats, rate, waiting = await self._sample()
            except Exception as exc:  # the store is busy or gone: say so, try later
                logger.warning("progress: reading the figures failed (%s)", exc)
                said |= news  # (not tried again every second)
            else:
                line = log_line(stats, rate, waiting)
                extra = figures(stats, rate) | {"waiting": waiting_text(waiting) or None}
                logger.info(line, extra=fields(**extra))
                said = {w.origin for w in waiting if w.pages}
            await asyncio.sleep(REFRESH)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._live is not None:
            self._live.stop()
