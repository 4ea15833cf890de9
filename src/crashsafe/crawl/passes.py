"""Passes of a crawl that keeps running: ``crawl --continuous`` (pages as they fall due,
crawl/revisits.py) and ``crawl --every 6h`` (every page, a pass every six hours from the
start of the last).

A worker that finds nothing pending or leased has seen its pass end: the pass is
finished (records no page yielded again are gone, its figures noted) and the next one
begins when it is due, decided in the store under one lock (store/sql_passes.py), so two
machines never run two passes of a crawl at once: the second finds the pass open and
works on it. A pass that overruns delays the next, which begins as soon as it ends and
says how late it is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from crashsafe.errors import ConfigError
from crashsafe.store import PassFigures, PassTurn, Store

__all__ = ["PASS_POLL", "PassKeeper", "Schedule", "figures_line", "schedule_of"]

logger = logging.getLogger("crashsafe.crawl")

#: seconds between two looks for a pass to begin while none is due: a pass another
#: machine begins is joined within this
PASS_POLL = 5.0


@dataclass(frozen=True, slots=True)
class Schedule:
    """When the next pass begins: ``every`` seconds after the last began (every page),
    or, ``continuous``, as soon as a page is due for its next visit (those pages).
    ``passes``: stop once this many passes ended while the run went on (None: never)."""

    every: float | None = None
    continuous: bool = False
    passes: int | None = None
    #: a continuous pass takes the pages due within this many seconds too (a quarter
    #: of revisit_min: a pass of many pages now and then, not one page at a time)
    early: float = 0.0


def schedule_of(continuous: bool, every: str | None, passes: int | None) -> Schedule | None:
    """``--continuous``, ``--every`` and ``--passes`` as a Schedule (None: one pass)."""
    if continuous and every:
        raise ConfigError(
            "--continuous and --every: choose one (--continuous fetches each page as it "
            "falls due; --every 6h fetches every page every six hours)"
        )
    if passes is not None and not (continuous or every):
        raise ConfigError("--passes needs --continuous or --every")
    if passes is not None and passes < 1:
        raise ConfigError(f"--passes {passes!r}: give a number of passes, 1 or more")
    if every:
        from crashsafe.durations import seconds as duration

        seconds = duration(every)
        if seconds is None or seconds < 1 or seconds > 100 * 365 * 86400:
            raise ConfigError(
                f"--every {every!r}: give a duration of 1s or more, like 30m, 6h or 1d"
            )
        return Schedule(every=seconds, passes=passes)
    return Schedule(continuous=True, passes=passes) if continuous else None


def _size(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000  # type: ignore[assignment]
    return str(n)


def figures_line(f: PassFigures) -> str:
    """``pass 3: 10,500 pages fetched (10,000 not modified, 0 unchanged, 500 parsed),
    1.2 MB; records: 12 new, 30 changed, 2 gone``."""
    pages = "1 page" if f.fetched == 1 else f"{f.fetched:,} pages"
    return (
        f"pass {f.number}: {pages} fetched ({f.not_modified:,} not modified, "
        f"{f.unchanged:,} unchanged, {f.parsed:,} parsed), {_size(f.body_bytes)} of bodies; "
        f"records: {f.created:,} new, {f.changed:,} changed, {f.gone:,} gone"
    )


class PassKeeper:
    """One worker's side of a crawl's passes."""

    def __init__(
        self,
        schedule: Schedule,
        call: Callable[..., Awaitable[Any]],
        store: Store,
        crawl: str,
    ) -> None:
        self.schedule = schedule
        self._call, self._store, self.crawl = call, store, crawl
        self._noted = 0  # the last pass whose end this worker logged (or ended before it)
        self._last: int | None = None  # the last pass this run takes part in (--passes)
        self._announced = 0  # the last pass after which this worker said what it waits for

    async def start(self) -> None:
        """Before the first page: the passes that ended before this run don't count (a
        complete pass is noted now, its figures kept, without a line of this run's)."""
        turn: PassTurn = await self._call(self._store.begin_pass, self.crawl, last=0)
        self._noted = turn.number - 1 if turn.open else turn.number
        if self.schedule.passes is not None:
            self._last = self._noted + self.schedule.passes

    async def after_pass(self) -> float | None:
        """Called when nothing of the crawl is pending or leased. Returns None when the
        run has had its passes (stop), 0 when a pass is open (lease again), else the
        seconds to wait before looking again."""
        s = self.schedule
        turn: PassTurn = await self._call(
            self._store.begin_pass, self.crawl, every=s.every, due=s.continuous,
            early=s.early, last=self._last,
        )  # fmt: skip
        if turn.open:
            return 0.0
        ended = turn.number - 1 if turn.started is not None else turn.number
        if ended > self._noted:
            if turn.started is None and not turn.ended:  # (else noted by begin_pass)
                await self._call(self._store.finish_pass, self.crawl)
            await self._log_end(ended)
        if turn.ended:
            return None
        if turn.started is not None:
            late = ""
            if s.every is not None and turn.late > min(1.0, s.every / 10):  # (not a poll's)
                idle = turn.late - turn.overran  # (no worker ran once the last pass ended)
                why = f"the last pass ran {_duration(turn.overran)} longer than --every " + (
                    f"{_duration(s.every)}" if idle <= min(1.0, s.every / 10) else
                    f"{_duration(s.every)}, then no worker ran for {_duration(idle)}"
                ) if turn.overran else "no worker was running when it was due"  # fmt: skip
                late = f", {_duration(turn.late)} after its time: {why}"
            logger.log(
                logging.WARNING if late else logging.INFO,
                "%s: pass %d begins: %d page(s) due%s",
                self.crawl, turn.started.number, turn.started.requeued, late,
            )  # fmt: skip
            await self._fold()
            return 0.0
        if turn.number > self._announced:  # a wait, said once a pass (not every look)
            self._announced = turn.number
            if turn.wait is None:
                logger.info("%s: no page will be due; waiting for pages to crawl", self.crawl)
            else:
                when = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + turn.wait))
                logger.info(
                    "%s: pass %d begins when it is due, in %s (%s)",
                    self.crawl, turn.number + 1, _duration(turn.wait), when,
                )  # fmt: skip
        return PASS_POLL if turn.wait is None else min(max(turn.wait, 0.0), PASS_POLL)

    async def _fold(self) -> None:
        """The worker that began a pass folds the grants the last passes made
        (store/sql_retention.py): the table stays the crawl's size, however many. Said
        after the pass's line: the first fold of a grown database takes seconds."""
        began = time.monotonic()
        folded = await self._call(self._store.fold_grants, self.crawl)
        logger.log(
            logging.INFO if folded >= 100_000 else logging.DEBUG,
            "%s: %d lease grants folded into counts (%.1f s)",
            self.crawl, folded, time.monotonic() - began,
        )  # fmt: skip

    async def _log_end(self, number: int) -> None:
        self._noted = number
        found = await self._call(self._store.pass_figures, self.crawl, limit=3)
        for figures in found:
            if figures.number == number:
                logger.info("%s: %s", self.crawl, figures_line(figures))


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            whole, rest = divmod(seconds, size)
            return f"{whole}{unit}" + (_duration(rest) if rest and unit != "m" else "")
    return f"{seconds}s"
