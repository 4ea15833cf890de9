"""The console's snapshot reads a dead letter again only when it changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crashsafe.console.snapshot import take
from crashsafe.store import NewUrl, PageOutcome, open_store


def test_the_dead_letter_is_read_again_only_when_it_changed(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}")
    reads = []
    failed = store.failed

    def counted(crawl: str | None = None) -> Any:
        reads.append(crawl)
        return failed(crawl)

    store.failed = counted  # type: ignore[method-assign]
    try:
        store.enqueue("c", [NewUrl(f"http://a.test/{i}") for i in range(3)])
        owner = store.register_worker("c")
        one, two, _ = sorted(store.lease("c", owner, 3, 60), key=lambda x: x.url)
        store.commit_pages("c", [PageOutcome(one, "failed", 500, "HTTP 500")])
        groups: dict[str, Any] = {}
        for _ in range(3):
            [group] = take(store, groups)["crawls"][0]["failed_groups"]
        assert group["count"] == 1 and len(reads) == 1  # three snapshots, one read
        store.commit_pages("c", [PageOutcome(two, "failed", 404, "HTTP 404")])
        assert len(take(store, groups)["crawls"][0]["failed_groups"]) == 2 and len(reads) == 2
        store.retry_failed("c", urls=[one.url])
        [left] = take(store, groups)["crawls"][0]["failed_groups"]
        assert left["error"] == "HTTP 404" and len(reads) == 3
        # failed again, refused before its request (no "failed" outcome counted): read
        [again] = store.lease("c", owner, 1, 60)
        refused = PageOutcome(again, "failed", error="a loopback address: refused", sent=False)
        store.commit_pages("c", [refused])
        shown = take(store, groups)["crawls"][0]["failed_groups"]
        assert len(shown) == 2 and len(reads) == 4
        # between two snapshots, the other fails again, refused: only "refused" moved
        store.retry_failed("c", urls=[two.url])
        [again] = store.lease("c", owner, 1, 60)
        refused = PageOutcome(again, "failed", error="a loopback address: refused", sent=False)
        store.commit_pages("c", [refused])
        [group] = take(store, groups)["crawls"][0]["failed_groups"]
        assert group["count"] == 2 and len(reads) == 5
    finally:
        store.close()


def test_an_action_does_not_wait_behind_a_snapshot_reading_the_dead_letter(
    tmp_path: Path, monkeypatch: Any
) -> None:
    # A dead letter of 100 000 URLs took the snapshot 30 s to group, and Pause waited
    # behind it on the console's one store thread (found by a review).
    import asyncio
    import threading

    from crashsafe.console import snapshot
    from crashsafe.console.snapshot import Hub

    url = f"sqlite:///{tmp_path / 'x.db'}"
    store = open_store(url)
    store.enqueue("c", [NewUrl("http://a.test/1")])
    [lease] = store.lease("c", store.register_worker("c"), 1, 60)
    store.commit_pages("c", [PageOutcome(lease, "failed", 500, "HTTP 500")])
    store.close()
    reading, release = threading.Event(), threading.Event()
    grouped = snapshot.failed_groups

    def slow(failed: Any) -> Any:
        reading.set()
        release.wait(60)
        return grouped(failed)

    monkeypatch.setattr(snapshot, "failed_groups", slow)
    hub = Hub(lambda: open_store(url, create=False))

    async def go() -> bool:
        snap = asyncio.ensure_future(hub.latest())
        await asyncio.get_running_loop().run_in_executor(None, reading.wait, 60)
        try:  # the snapshot is reading the dead letter now; the pause goes through
            paused = await asyncio.wait_for(
                hub.act(lambda s: s.pause("c", actor="test")), timeout=30
            )
        finally:
            release.set()
        await snap
        return paused

    try:
        assert asyncio.run(go()) is True
    finally:
        release.set()
        hub.close()
    check = open_store(url, create=False)
    try:
        assert check.control("c").paused
    finally:
        check.close()
