"""Ctrl-C and SIGTERM for long jobs: the first asks for a graceful stop, the second exits.

Crawls and batch jobs both finish (or give back) the work in flight on the first signal
and print how to resume; a second signal ends the process at once with status 130.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import TracebackType

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_last: list[int] = [signal.SIGINT]  # the signal being handled
_parent_gone = threading.Event()


def parent_gone() -> None:
    """In a worker: the command that started it is gone; the SIGTERM it sends itself
    next is said as that, not as a Ctrl-C nobody pressed."""
    _parent_gone.set()


def stopping_line(doing: str) -> str:
    """The line a first signal prints, as what sent it: ``Stopping: finishing 3 page(s)
    in flight (Ctrl-C again to abort at once)...`` after a Ctrl-C."""
    if _parent_gone.is_set():
        return f"Stopping: the command that started this worker is gone; {doing}..."
    if _last[0] == signal.SIGTERM:
        return f"Stopping (SIGTERM): {doing} (a second signal aborts at once)..."
    return f"Stopping: {doing} (Ctrl-C again to abort at once)..."


class GracefulInterrupts:
    """Install the handlers on the running loop for the ``async with`` block.

    Args:
        on_first: called on the first signal (stop scheduling, note the interruption).
        enabled: False leaves signals alone (tests, or a host application's own handling).
    """

    def __init__(self, on_first: Callable[[], None], *, enabled: bool = True) -> None:
        self.on_first = on_first
        self.enabled = enabled
        self.received = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def _handle(self, sig: int) -> None:
        _last[0] = sig
        self.received += 1
        if self.received > 1:
            sys.stderr.write("\nAborted: second interrupt. Run the same command to resume.\n")
            sys.stderr.flush()
            os._exit(130)
        self.on_first()

    async def __aenter__(self) -> GracefulInterrupts:
        if self.enabled:
            self._loop = asyncio.get_running_loop()
            for sig in SIGNALS:
                self._loop.add_signal_handler(sig, self._handle, sig)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._loop is not None:
            for sig in SIGNALS:
                self._loop.remove_signal_handler(sig)
