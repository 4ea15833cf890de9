"""``export -o FILE`` replaces FILE whole by a rename, or leaves it as it was (#11 item 10)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from crashsafe.demo.shop import ShopThread
from tests.helpers import run_cli

RECORDS = 100  # about 28 KB of JSON Lines: more than the 8 KiB small disk holds


@pytest.fixture
def db(shop: Callable[..., ShopThread], tmp_path: Path) -> str:
    site = shop(listings=2, per_listing=RECORDS // 2)
    url = f"sqlite:///{tmp_path / 'shop.db'}"
    crawled = run_cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", url,
                      "--start-url", f"{site.url}/list/0", "--no-progress")  # fmt: skip
    assert crawled.returncode == 0, crawled.stderr
    return url


def test_export_to_a_file_replaces_it_by_a_rename(db: str, tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("the previous export\n")
    before = target.stat().st_ino
    exported = run_cli("export", "--db", db, "-o", str(target))
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in target.read_text().splitlines()]
    assert len(rows) == RECORDS and {r["source"] for r in rows} == {"demo-shop"}
    # a new file renamed over the old one, not the old one truncated and rewritten
    assert target.stat().st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir() if "out.jsonl" in p.name) == ["out.jsonl"]


def test_an_export_that_fails_half_way_leaves_the_previous_file_whole(
    db: str, small_disk: Path
) -> None:
    target = small_disk / "out.jsonl"
    target.write_text("the previous export\n")
    for fmt in ("jsonl", "csv"):
        failed = run_cli("export", "--db", db, "--format", fmt, "-o", str(target))
        assert failed.returncode == 1
        assert target.read_text() == "the previous export\n"
        assert [p.name for p in small_disk.iterdir()] == ["out.jsonl"]  # no temporary file
        assert "Traceback" not in failed.stderr and "Exception ignored" not in failed.stderr
        [line] = failed.stderr.splitlines()
        assert str(target) in line and "disk full" in line, line
