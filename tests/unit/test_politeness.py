"""Per-host slots keep the state of the hosts in use, not of every host a crawl met."""

from __future__ import annotations

import asyncio
import time

from crashsafe.crawl.politeness import HostSlots


def test_idle_hosts_are_dropped_and_busy_or_spaced_ones_kept() -> None:
    async def run() -> None:
        slots = HostSlots(limit=1, delay=0.0, kept=10)
        busy_entered = asyncio.Event()
        release = asyncio.Event()

        async def hold(host: str) -> None:
            async with slots.slot(host):
                busy_entered.set()
                await release.wait()

        holder = asyncio.create_task(hold("busy"))
        await busy_entered.wait()
        async with slots.slot("spaced", delay=3600.0):  # its next start is an hour away
            pass
        for n in range(1000):  # a broad crawl: a thousand hosts, one page each
            async with slots.slot(f"h{n}"):
                pass
        assert slots.hosts() <= 2 * 10 + 1  # (a sweep each time as many hosts again)
        # the busy host kept its semaphore: a second request to it still waits its turn
        second = asyncio.create_task(hold("busy"))
        await asyncio.sleep(0)
        assert not second.done() and slots._users["busy"] == 2
        # and the spaced one its next start: a request to it would wait the hour
        assert slots._next_start["spaced"] > time.monotonic() + 3000
        release.set()
        await asyncio.gather(holder, second)

    asyncio.run(run())
