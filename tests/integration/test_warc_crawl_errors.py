"""A full disk under the WARC archive or the files folder stops the crawl with one line;
the pages in flight wait for the next run, nothing is failed nor lost."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import crashsafe
from crashsafe import CrashsafeError, open_store
from crashsafe.demo.shop import ShopThread
from tests.integration.test_downloads import Photos


@pytest.mark.parametrize("where", ["warc_dir", "files_dir"])
def test_a_full_disk_stops_the_crawl_and_the_next_run_completes(
    where: str, shop: Callable[..., ShopThread], tmp_path: Path, small_disk: Path
) -> None:
    site = shop(listings=1, per_listing=10)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    start = [f"{site.url}/list/0"]
    with pytest.raises(CrashsafeError, match="disk full"):
        crashsafe.crawl(Photos, db=db, start_urls=start, **{where: str(small_disk)})
    store = open_store(db)
    stats = store.stats("photos")
    store.close()
    assert stats.failed == 0 and stats.pending >= 1 and stats.leased == 0
    result = crashsafe.crawl(Photos, db=db, start_urls=start, **{where: str(tmp_path / "big")})
    assert result.stats.failed == 0 and result.stats.records == 10


def test_halts_spend_no_attempt(
    shop: Callable[..., ShopThread], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk full for more runs than max_attempts: no page goes to the dead letter (no
    root needed: the archive's write is made to fail as a full disk does)."""
    import errno

    from crashsafe.effects import warc

    def full(self: warc.WarcArchive, data: bytes) -> None:
        raise warc._write_error(Path("x.warc.gz"), OSError(errno.ENOSPC, "No space left"))

    site = shop(listings=1, per_listing=5)
    db = f"sqlite:///{tmp_path / 'p.db'}"
    start = [f"{site.url}/list/0"]
    with monkeypatch.context() as m:
        m.setattr(warc.WarcArchive, "_write", full)
        for _ in range(3):
            with pytest.raises(CrashsafeError, match="disk full"):
                crashsafe.crawl(
                    Photos, db=db, start_urls=start, warc_dir=str(tmp_path / "w"),
                    max_attempts=2,
                )  # fmt: skip
    result = crashsafe.crawl(
        Photos, db=db, start_urls=start, warc_dir=str(tmp_path / "w"), max_attempts=2
    )
    assert result.stats.failed == 0 and result.stats.records == 5
