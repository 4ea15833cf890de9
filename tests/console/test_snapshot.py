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
