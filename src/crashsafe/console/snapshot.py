"""What the console shows, read from the store in one go: every crawl's state and counts,
its workers, paused origins, dead letter by error, webhook deliveries, and the audit.

A snapshot is plain JSON-ready data. ``Hub`` takes one at most every ``every`` seconds
whatever the number of pages watching, on the one thread that holds the store (a store is
used from one thread at a time), and keeps an hour of done counts for the rate chart.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from crashsafe.store import Control, FailedUrl, Store, WorkerInfo
from crashsafe.text import shown_endpoint

T = TypeVar("T")
HISTORY_SECONDS = 3600.0
SAMPLE_EVERY = 5.0  # seconds between two points of the rate chart
FAILED_GROUPS = 20  # error groups shown per crawl
EXAMPLE_ERROR_CHARS = 2000


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def crawl_state(
    pending: int, leased: int, done: int, control: Control, workers: list[WorkerInfo], waiting: int
) -> tuple[str, str]:
    """(state, why): ``paused``, ``running``, ``waiting``, ``complete`` or ``stopped``."""
    alive = sum(1 for w in workers if w.alive)
    if control.paused:
        return "paused", f"paused by {control.paused_by}"
    if pending + leased == 0:
        return ("complete", "nothing pending") if done else ("stopped", "nothing crawled yet")
    if alive and waiting and not leased:
        return "waiting", "every page left waits for an origin that cannot be reached"
    if alive:
        if control.origins and not leased:
            return "waiting", "the pages left are at paused origins"
        return "running", f"{alive} worker(s)"
    return "stopped", "pages left, no worker running: run the crawl command to resume"


def take(store: Store, groups: dict[str, Any] | None = None) -> dict[str, Any]:
    """One snapshot of every crawl in ``store`` (see the module docstring). ``groups``
    keeps each crawl's dead letter by error between snapshots: read again only when the
    failed count or the failures ever recorded changed (a dead letter of 100 000 URLs is
    not read every second while nothing fails)."""
    groups = {} if groups is None else groups
    crawls = []
    for name in store.crawls():
        s = store.stats(name)
        e = store.effect_stats(name)
        control = store.control(name)
        workers = store.workers(name)
        waiting = [w for w in store.waiting(name) if w.pages]
        mark = (s.failed, s.outcomes.get("failed", 0), s.outcomes.get("refused", 0))
        kept = groups.get(name)
        # Read again when it changed, but a large one not more often than it takes ten
        # times over to read (100 000 failures: seconds; the console's other calls wait).
        if kept is None or (kept[0] != mark and time.monotonic() >= kept[2]):
            started = time.monotonic()
            grouped = failed_groups(store.failed(name)) if s.failed else []
            took = time.monotonic() - started
            groups[name] = (mark, grouped, started + 10 * took if took > 0.5 else 0.0)
        elif kept[0] != mark and not s.failed:
            groups[name] = (mark, [], 0.0)  # (retried: emptied at once)
        state, why = crawl_state(s.pending, s.leased, s.done, control, workers, len(waiting))
        crawls.append({
            "name": name,
            "state": state,
            "why": why,
            "urls": {"pending": s.pending, "leased": s.leased, "done": s.done,
                     "failed": s.failed, "skipped": s.outcomes.get("skipped", 0)},
            "records": {"live": s.records, "gone": e.gone, "versions": e.versions},
            "requests": {"total": s.requests, "retries": s.retries, "repeated": s.repeated,
                         "stale": s.stale},
            "deliveries": dict(e.deliveries),
            "endpoints": [{"url": shown_endpoint(url), "deliveries": states}
                          for url, states in store.deliveries_by_endpoint(name).items()]
                         if e.deliveries else [],
            "last_pass_at": iso(e.last_pass_at),
            "paused": None if not control.paused else
                {"by": control.paused_by, "since": iso(control.paused_since)},
            "paused_origins": [{"origin": o.origin, "by": o.by, "since": iso(o.since)}
                               for o in control.origins],
            "workers": [{"owner": w.owner, "host": w.host, "pid": w.pid, "alive": w.alive,
                         "leases": w.leases, "pages": w.pages, "started_at": iso(w.started_at),
                         "last_seen": iso(w.last_seen)}
                        for w in workers],
            "waiting": [{"origin": w.origin, "pages": w.pages, "why": w.why} for w in waiting],
            "failed_groups": groups[name][1],
        })  # fmt: skip
    audit = [
        {"crawl": a.crawl, "action": a.action, "target": a.target, "actor": a.actor,
         "at": iso(a.at), "detail": a.detail}
        for a in store.audit(limit=50)
    ]  # fmt: skip
    return {"at": iso(time.time()), "crawls": crawls, "audit": audit}


def failed_groups(failed: list[FailedUrl]) -> list[dict[str, Any]]:
    """The dead letter by error (as ``failed --group``), most frequent first: each with an
    example's whole error, which holds the first bytes of the response that failed, and
    its key (a retry of the group names it; the console finds its URLs again)."""
    from crashsafe.failures import group_failures

    return [
        {"count": len(g.failures), "error": g.label, "key": g.key, "example": g.failures[0].url,
         "example_error": (g.failures[0].error or "")[:EXAMPLE_ERROR_CHARS],
         "status": g.failures[0].http_status}
        for g in group_failures(failed)[:FAILED_GROUPS]
    ]  # fmt: skip


class Hub:
    """The console's one store, on its own thread, and the latest snapshot of it."""

    def __init__(
        self,
        open_store: Callable[[], Store] | None,
        *,
        every: float = 1.0,
        checkpoints: Sequence[Path] = (),
    ) -> None:
        from crashsafe.console.batches import BatchWatch

        self._batches = [BatchWatch(path) for path in checkpoints]
        self.has_database = open_store is not None
        self._groups: dict[str, Any] = {}  # take()'s dead letters by error, kept
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crashsafe-console")
        self._store: Store | None = None
        # Actions (pause, cancel, retry) on a thread and a connection of their own: never
        # behind a snapshot reading a large dead letter.
        self._acting = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crashsafe-act")
        self._action_store: Store | None = None
        self._refreshing: set[asyncio.Future[Any]] = set()  # (kept: tasks are weakly held)
        self._open = open_store
        self.every = every
        self._latest: dict[str, Any] | None = None
        self._taken = 0.0
        self._lock = asyncio.Lock()
        self._history: dict[str, deque[tuple[float, int]]] = {}

    async def call(self, fn: Callable[[Store], T]) -> T:
        """Run ``fn(store)`` on the store's thread."""

        def run() -> T:
            if self._store is None and self._open is not None:
                self._store = self._open()
            return fn(self._store)  # type: ignore[arg-type]  # (None: batches only)

        return await asyncio.get_running_loop().run_in_executor(self._pool, run)

    async def act(self, fn: Callable[[Store], T]) -> T:
        """Run ``fn(store)`` on the actions' thread, with the actions' connection."""

        def run() -> T:
            if self._action_store is None and self._open is not None:
                self._action_store = self._open()
            return fn(self._action_store)  # type: ignore[arg-type]

        return await asyncio.get_running_loop().run_in_executor(self._acting, run)

    def refresh_soon(self) -> None:
        """Take a fresh snapshot in the background (after an action): whoever asks for
        the state next waits for it (the lock is taken in turn), the action's answer does
        not."""
        task = asyncio.ensure_future(self.latest(fresh=True))
        self._refreshing.add(task)
        task.add_done_callback(self._refreshing.discard)

    async def latest(self, *, fresh: bool = False) -> dict[str, Any]:
        """The snapshot, taken again if it is older than ``every`` (or ``fresh``)."""
        async with self._lock:
            now = time.monotonic()
            if fresh or self._latest is None or now - self._taken >= self.every:
                snap: dict[str, Any]
                if self._open is None:  # batch jobs only: no crawl database
                    snap = {"at": iso(time.time()), "crawls": [], "audit": []}
                else:
                    snap = await self.call(lambda store: take(store, self._groups))
                snap["batches"] = await self.call(
                    lambda _: [watch.view() for watch in self._batches]
                )
                self._taken = time.monotonic()
                await self._note(snap)
                self._latest = snap
            return self._latest

    async def _note(self, snap: dict[str, Any]) -> None:
        """Keep an hour of (time, pages finished) per crawl; each crawl's ``rate`` is pages
        per second between the points kept. A crawl first seen starts with the last hour
        as its rows have it (pages finished per minute), read once."""
        now = time.time()
        for crawl in snap["crawls"]:
            name = crawl["name"]
            done = crawl["urls"]["done"] + crawl["urls"]["failed"]
            points = self._history.get(name)
            if points is None:
                points = self._history[name] = await self._past_hour(name, now, done)
            if not points or now - points[-1][0] >= SAMPLE_EVERY:
                points.append((now, done))
            while points and now - points[0][0] > HISTORY_SECONDS:
                points.popleft()
            crawl["rate"] = [
                {"at": iso(t1), "per_second": round((d1 - d0) / (t1 - t0), 2)}
                for (t0, d0), (t1, d1) in zip(points, list(points)[1:], strict=False)
                if t1 > t0
            ]

    async def _past_hour(self, crawl: str, now: float, done: int) -> deque[tuple[float, int]]:
        """(end of each minute of the last hour, pages finished by then), from the rows."""
        since = now - HISTORY_SECONDS
        per_minute = dict(await self.call(lambda s: s.finished_per_minute(crawl, since)))
        points: deque[tuple[float, int]] = deque()
        if not per_minute:
            return points
        finished = done - sum(per_minute.values())  # by the start of the hour
        first = min(per_minute)
        points.append((since + first * 60, finished))
        for minute in range(first, int(HISTORY_SECONDS // 60)):
            at = since + (minute + 1) * 60
            if at >= now:
                break
            finished += per_minute.get(minute, 0)
            points.append((at, finished))
        return points

    def close(self) -> None:
        def shut() -> None:
            if self._store is not None:
                self._store.close()

        def shut_actions() -> None:
            if self._action_store is not None:
                self._action_store.close()

        self._pool.submit(shut).result()
        self._pool.shutdown()
        self._acting.submit(shut_actions).result()
        self._acting.shutdown()
