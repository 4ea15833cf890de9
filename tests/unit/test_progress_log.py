"""The progress line off a terminal (crawl/progress.py): a failing store is said once an
interval, not every second, and a line still comes every interval. On a clock of the
test's own: each of the loop's sleeps moves it on."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from crashsafe.crawl import progress
from crashsafe.crawl.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


def run_for(seconds: float, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        clock.now += delay
        if clock.now - 1000.0 > seconds:
            raise asyncio.CancelledError
        await real_sleep(0)

    monkeypatch.setattr(progress, "time", SimpleNamespace(monotonic=clock.monotonic))
    monkeypatch.setattr(progress.asyncio, "sleep", sleep)

    async def call(fn: Any, *args: Any) -> Any:  # (as the engine's: the store's method)
        return fn(*args)

    shown = Progress("c", store=store, call=call, live=False, interval=30.0)

    async def main() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await shown._log()

    asyncio.run(main())


def test_a_failing_store_is_said_once_an_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="crashsafe.crawl")

    def failing(crawl: str) -> Any:
        raise RuntimeError("database is locked")

    run_for(100, SimpleNamespace(stats=failing, waiting=failing), monkeypatch)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert 3 <= len(warned) <= 4  # at 1, 31, 61 and 91 s: not one a second


def test_a_line_every_interval_when_the_waiting_query_alone_fails(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="crashsafe.crawl")
    store_stats = SimpleNamespace(done=0, failed=0)  # (what the rate reads)

    def waiting_fails(crawl: str) -> Any:
        raise RuntimeError("statement timeout")

    monkeypatch.setattr(progress, "log_line", lambda stats, rate, waiting: "line")
    monkeypatch.setattr(progress, "figures", lambda stats, rate: {})
    store = SimpleNamespace(stats=lambda crawl: store_stats, waiting=waiting_fails)
    run_for(100, store, monkeypatch)
    infos = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert 3 <= len(infos) <= 4 and set(infos) == {"line"}  # the figures all the same
    assert len(warned) == len(infos)  # each saying why the waiting part is missing
