"""Ctrl-C and SIGTERM for long jobs: the first asks for a graceful stop, the second exits.

Crawls and batch jobs both finish (or give back) the work in flight on the first signal
and print how to resume; a second signal ends the process at once with status 130.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from types import TracebackType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


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

    def _handle(self) -> None:
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
                self._loop.add_signal_handler(sig, self._handle)
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
