"""A live progress line for batch jobs on a terminal, like the crawl's."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from crashsafe.batch.runner import BatchSummary

REFRESH = 0.5  # seconds


def progress_line(summary: BatchSummary, elapsed: float, *, priced: bool) -> str:
    """``items 120/200 (60 %)  40/s  ETA 2 s  tokens in 5,653 out 2,557  spent 0.0024``."""
    done, total = summary.items_ok, summary.to_do
    parts = [f"items {done:,}/{total:,}" + (f" ({done / total:.0%})" if total else "")]
    if elapsed > 0 and done:
        rate = done / elapsed
        parts.append(f"{rate:,.0f}/s" if rate >= 10 else f"{rate:.1f}/s")
        left = max(total - done, 0)
        parts.append(f"ETA {_duration(left / rate)}")
    usage = summary.usage
    if usage.get("prompt_tokens") or usage.get("completion_tokens"):
        parts.append(
            f"tokens in {usage.get('prompt_tokens', 0):,} out {usage.get('completion_tokens', 0):,}"
        )
    if priced:
        parts.append(f"spent {summary.spent:.4f}")
    if summary.batches_failed:
        parts.append(f"failed batches {summary.batches_failed}")
    return "  ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class BatchProgress:
    """Redraws :func:`progress_line` from a running job's summary twice a second."""

    def __init__(
        self, summary: BatchSummary, *, priced: bool, console: Console | None = None
    ) -> None:
        from rich.console import Console
        from rich.live import Live
        from rich.text import Text

        self.summary = summary
        self.priced = priced
        self.console = console or Console(stderr=True)
        self._text = Text
        self._live = Live(Text("starting..."), console=self.console, transient=True)
        self._task: asyncio.Task[None] | None = None
        self._started = time.monotonic()

    def start(self) -> None:
        self._started = time.monotonic()
        self._live.start()
        self._task = asyncio.create_task(self._refresh())

    async def _refresh(self) -> None:
        while True:
            self.update()
            await asyncio.sleep(REFRESH)

    def update(self) -> None:
        elapsed = time.monotonic() - self._started
        self._live.update(self._text(progress_line(self.summary, elapsed, priced=self.priced)))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.update()
        self._live.refresh()  # the last state is drawn once before the line goes
        self._live.stop()
