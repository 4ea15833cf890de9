"""Live progress on a terminal: pages done/known, rate, records, retries, failures.

Figures are read from the store (computed from rows), once a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.text import Text

from crashsafe.store import CrawlStats, Store

REFRESH = 1.0


def progress_line(stats: CrawlStats, rate: float | None) -> Text:
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
    return line


class Progress:
    def __init__(
        self,
        crawl: str,
        store: Store,
        call: Callable[..., Awaitable[Any]],
        console: Console | None = None,
    ) -> None:
        self.crawl = crawl
        self.store = store
        self.call = call
        self.console = console or Console(stderr=True)
        self._live = Live(Text(f"{crawl}: starting..."), console=self.console, transient=True)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._live.start()
        self._task = asyncio.create_task(self._refresh())

    async def _refresh(self) -> None:
        samples: list[tuple[float, int]] = []
        while True:
            stats: CrawlStats = await self.call(self.store.stats, self.crawl)
            now = time.monotonic()
            samples = [*samples[-9:], (now, stats.done + stats.failed)]
            rate = None
            if len(samples) > 1 and now > samples[0][0]:
                rate = (samples[-1][1] - samples[0][1]) / (now - samples[0][0])
            self._live.update(progress_line(stats, rate))
            await asyncio.sleep(REFRESH)

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._live.stop()
