"""A crawl's background duties to its leases: renew the ones in flight, and take back the
ones dead peers held.

Both run beside the crawl loop for its whole life. Renewal extends the leases of the
pages in flight every third of their length; a lease found lost (this worker was paused
past it, and the URL was granted again) stops its page, whose commit the store would
refuse anyway. The peer watch asks the store every few seconds, busy or not, to put back
the leases of workers whose liveness lock is free: a dead peer's URLs come back within
seconds, not when its leases expire (the idle loop asks too, more often).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from crashsafe.store import Backoff, Control, Lease, Store
from crashsafe.store.process import StoreCall

logger = logging.getLogger("crashsafe.crawl")
WATCH_PEERS_EVERY = 5.0  # seconds between looks for dead workers while busy
WATCH_CONTROLS_EVERY = 1.0  # seconds between looks at pause/resume/cancel
TOUCH_EVERY_LOOKS = 5  # a worker notes it is at work (last_seen) every fifth look
TEND_WAL_EVERY = 5.0  # seconds between looks at the size of an SQLite WAL


class InFlight(Protocol):
    lease: Lease
    committing: bool


class Upkeep:
    """Renewal and the peer watch of one worker (see the module docstring)."""

    def __init__(
        self,
        *,
        call: StoreCall,
        store: Store,
        crawl: str,
        lease_seconds: float,
        backoff: Backoff,
        inflight: Mapping[asyncio.Task[None], InFlight],
    ) -> None:
        self._call, self._store, self._crawl = call, store, crawl
        self._lease_seconds = lease_seconds
        self._backoff = backoff
        self._inflight = inflight

    async def renew_forever(self) -> None:
        period = self._lease_seconds / 3
        while True:
            await asyncio.sleep(period)
            if not self._inflight:
                continue
            leases = [f.lease for f in self._inflight.values()]
            try:
                lost = await self._call(self._store.renew, self._crawl, leases, self._lease_seconds)
            except Exception as exc:  # the commits will tell; keep renewing
                logger.warning("renewing leases failed (%s); trying again", exc)
                continue
            if lost:
                gone = {x.grant_id for x in lost}
                for task, slot in list(self._inflight.items()):
                    if slot.lease.grant_id in gone and not slot.committing:
                        task.cancel()

    async def watch_controls_forever(self, owner: str, cancel: Callable[[str], None]) -> None:
        """Look at how the crawl is steered every second: say when it is paused or
        resumed (the claims themselves grant nothing while it is paused), and call
        ``cancel`` with who asked once ``crashsafe cancel`` asked this worker to stop."""
        said: str | None = None
        looks = 0
        while True:
            if looks % TOUCH_EVERY_LOOKS == 0:
                try:
                    await self._call(self._store.touch_worker, owner)
                except Exception as exc:  # only what the console shows: the next one may work
                    logger.debug("noting this worker's last_seen failed (%s)", exc)
            looks += 1
            try:
                control = await self._call(self._store.control, self._crawl, owner)
            except Exception as exc:  # the next look may work; the claims enforce pauses
                logger.warning("reading the crawl's controls failed (%s); trying again", exc)
            else:
                if control.stop_asked_by is not None:
                    cancel(control.stop_asked_by)
                state = steering_line(control)
                if state != said:
                    if state is not None:
                        logger.info("%s", state)
                    elif said is not None:
                        logger.info("crawl %s resumed: leasing again", self._crawl)
                    said = state
            await asyncio.sleep(WATCH_CONTROLS_EVERY)

    async def tend_wal_forever(self, name: str) -> None:
        """SQLite: checkpoint and truncate a WAL that has grown, every few seconds, and
        warn when a reader's old snapshot keeps it growing (``name``: the database)."""
        held_before = 0
        while True:
            await asyncio.sleep(TEND_WAL_EVERY)
            try:
                state = await self._call(self._store.tend_wal)
            except Exception as exc:
                logger.warning("checkpointing the WAL failed (%s)", exc)
                continue
            if state is None or not state.held:
                held_before = 0
                continue
            if held_before and state.size > held_before:  # held twice, and growing
                logger.warning(
                    "the WAL of %s is %.0f MB and growing: a reader holds an old snapshot "
                    "(an open `sqlite3` shell, a program reading in one long transaction?); "
                    "it is checkpointed and shrinks once that reader ends its transaction",
                    name,
                    state.size / 1e6,
                )
            held_before = state.size

    async def watch_peers_forever(self) -> None:
        while True:
            await asyncio.sleep(WATCH_PEERS_EVERY)
            try:
                await self.reclaim()
            except Exception as exc:  # e.g. the store is reconnecting: next time
                logger.warning("looking for dead workers failed (%s)", exc)

    async def reclaim(self) -> int:
        """Put back the leases of dead workers now; how many."""
        return await self._call(
            self._store.reclaim_dead_workers, self._crawl, backoff=self._backoff
        )


def steering_line(control: Control) -> str | None:
    """What a worker says of a pause (None: not paused)."""
    if control.paused:
        return (
            f"crawl {control.crawl} paused by {control.paused_by}: no page is leased until "
            "`crashsafe resume` (pages in flight finish)"
        )
    if control.origins:
        names = ", ".join(f"{o.origin} (by {o.by})" for o in control.origins)
        return f"crawl {control.crawl}: paused origin(s) {names}; the others go on"
    return None
