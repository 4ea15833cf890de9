"""A clock that tests move on by hand, instead of sleeping."""

from __future__ import annotations

import time


class ManualClock:
    """Seconds since the epoch, standing still until :meth:`advance`. It starts at the
    real time, so that a worker process the test starts (on the real clock) agrees."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
