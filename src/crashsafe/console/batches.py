"""Batch jobs on the console (``crashsafe ui --checkpoint FILE``): what each checkpoint
holds, read again only when the file changed, and its rate from the console's samples."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crashsafe.console.snapshot import HISTORY_SECONDS, SAMPLE_EVERY, iso

LABELS_SHOWN = 20


class BatchWatch:
    """One checkpoint: its summary (``batch report``'s), re-read when it changed."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._seen: tuple[int, int] | None = None  # (size, mtime_ns) read last
        self._summary: dict[str, Any] = {}
        self._points: deque[tuple[float, int]] = deque()

    def view(self) -> dict[str, Any]:
        """What the page shows of the job (read on the store's thread: it may take a
        while for a big checkpoint, and never runs twice at once)."""
        from crashsafe.batch.checkpoint import scan
        from crashsafe.batch.report import build_report

        out: dict[str, Any] = {"checkpoint": str(self.path)}
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {**out, "error": "no such file yet (the job has not started)"}
        seen = (stat.st_size, stat.st_mtime_ns)
        if seen != self._seen:
            try:
                summary = build_report([self.path]).summary()
                found = scan(self.path)
            except Exception as exc:  # a file that is not a checkpoint: said on the page
                return {**out, "error": f"{type(exc).__name__}: {exc}"}
            summary["job"] = found.jobs[-1] if found.jobs else None
            totals = [line.get("input_items") for line in found.lines]
            known = [n for n in totals if isinstance(n, int) and not isinstance(n, bool)]
            summary["total"] = known[-1] if known else None  # the last run's input
            summary["labels"] = dict(list(summary["labels"].items())[:LABELS_SHOWN])
            self._summary, self._seen = summary, seen
        now = self._clock()
        items = int(self._summary.get("items", 0))
        if not self._points or now - self._points[-1][0] >= SAMPLE_EVERY:
            self._points.append((now, items))
        while self._points and now - self._points[0][0] > HISTORY_SECONDS:
            self._points.popleft()
        (t0, n0), (t1, n1) = self._points[0], self._points[-1]
        rate = (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0
        total, eta = self._summary.get("total"), None
        if isinstance(total, int) and rate > 0 and total > items:
            eta = iso(now + (total - items) / rate)
        return {**out, **self._summary, "items_per_second": round(rate, 2), "eta": eta,
                "updated": iso(stat.st_mtime)}  # fmt: skip
