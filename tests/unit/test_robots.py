"""Robots: a page cancelled while it waits for robots.txt does not cancel the answer the
origin's other pages wait for; the unreachable state does not pile up tracebacks."""

from __future__ import annotations

import asyncio

import pytest

from crashsafe.crawl.fetch_errors import TransientFetchError
from crashsafe.crawl.robots import Robots, RobotsStore, RobotsUnavailable
from crashsafe.store import RobotsEntry


def memory_store() -> RobotsStore:
    rows: dict[str, RobotsEntry] = {}

    async def load(origin: str) -> RobotsEntry | None:
        return rows.get(origin)

    async def claim(origin: str) -> bool:
        return True

    async def save(origin: str, body: str, age: float) -> bool:
        rows[origin] = RobotsEntry(body, age, None, 0, None, None)
        return True

    async def failed(origin: str, retry_in: float, why: str) -> bool:
        old = rows.get(origin)
        n = old.failures + 1 if old else 1
        rows[origin] = RobotsEntry(None, None, 0.0, n, retry_in, None)
        return True

    async def release(origin: str) -> None:
        pass

    async def space(origin: str, delay: float) -> None:
        pass

    return RobotsStore(
        load=load, claim=claim, save=save, failed=failed, release=release, space=space
    )


def test_a_cancelled_waiter_leaves_the_answer_to_the_others() -> None:
    async def go() -> tuple[bool, int]:
        gate = asyncio.Event()
        downloads = 0

        async def download(url: str) -> tuple[int, bytes]:
            nonlocal downloads
            downloads += 1
            await gate.wait()
            return 200, b"User-agent: *\nDisallow: /private\n"

        robots = Robots(
            store=memory_store(), download=download, user_agent="t", backoff=lambda n: 1.0
        )
        first = asyncio.create_task(robots.check("http://a.example/x"))
        second = asyncio.create_task(robots.check("http://a.example/private"))
        while downloads == 0:
            await asyncio.sleep(0)
        first.cancel()  # e.g. its lease was lost
        await asyncio.sleep(0)
        gate.set()
        allowed, _ = await second
        await robots.close()
        return allowed, downloads

    assert asyncio.run(go()) == (False, 1)


def test_an_unreachable_robots_txt_raises_a_new_error_each_time() -> None:
    async def go() -> list[RobotsUnavailable]:
        async def download(url: str) -> tuple[int, bytes]:
            raise TransientFetchError("connection refused")

        robots = Robots(
            store=memory_store(), download=download, user_agent="t", backoff=lambda n: 60.0
        )
        errors = []
        for _ in range(3):
            with pytest.raises(RobotsUnavailable) as info:
                await robots.check("http://a.example/x")
            errors.append(info.value)
        return errors

    first, second, third = asyncio.run(go())
    assert first is not second and second is not third
    assert "connection refused" in str(first) and third.retry_at == second.retry_at


def test_a_broad_crawl_keeps_the_rules_of_recent_origins_only_and_reads_old_ones_again() -> None:
    async def go() -> tuple[int, int, bool]:
        downloads = 0

        async def download(url: str) -> tuple[int, bytes]:
            nonlocal downloads
            downloads += 1
            return 200, b"User-agent: *\nDisallow: /private\n"

        robots = Robots(
            store=memory_store(), download=download, user_agent="t", backoff=lambda n: 1.0
        )
        robots.kept = 10
        for n in range(100):
            assert (await robots.check(f"http://h{n}.example/x"))[0]
        held = len(robots._parsed)
        # the first origin's rules left memory: read again from the store, not downloaded
        allowed, _ = await robots.check("http://h0.example/private")
        await robots.close()
        return held, downloads, allowed

    held, downloads, allowed = asyncio.run(go())
    assert held <= 10 and downloads == 100 and not allowed
