"""``export -o FILE`` replaces FILE whole by a rename, or leaves it as it was (#11 item 10);
what an export holds: the items as yielded, exactly (#22 item 1, #23 items 4 and 5)."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from crashsafe.demo.shop import ShopThread
from tests.helpers import run_cli

RECORDS = 100  # with --with-meta about 28 KB of JSON Lines: more than the 8 KiB small disk holds


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
    assert len(rows) == RECORDS and {tuple(r) for r in rows} == {
        ("name", "price", "_crashsafe_key")
    }
    # a new file renamed over the old one, not the old one truncated and rewritten
    assert target.stat().st_ino != before
    assert sorted(p.name for p in tmp_path.iterdir() if "out.jsonl" in p.name) == ["out.jsonl"]


def test_an_export_that_fails_half_way_leaves_the_previous_file_whole(
    db: str, small_disk: Path
) -> None:
    target = small_disk / "out.jsonl"
    target.write_text("the previous export\n")
    for fmt in ("jsonl", "csv"):
        failed = run_cli("export", "--db", db, "--format", fmt, "-o", str(target), "--with-meta")
        assert failed.returncode == 1
        assert target.read_text() == "the previous export\n"
        assert [p.name for p in small_disk.iterdir()] == ["out.jsonl"]  # no temporary file
        assert "Traceback" not in failed.stderr and "Exception ignored" not in failed.stderr
        [line] = failed.stderr.splitlines()
        assert str(target) in line and "disk full" in line, line


ITEMS_SPIDER = """
from crashsafe import Spider

class Items(Spider):
    name = "items"
    item_key = "sku"

    def parse(self, page):
        # an item's own id, url, version and key fields: crashsafe's never replace them
        yield {"sku": "A", "id": 7, "url": "mine", "version": "v9", "key": "k", "z": 1, "a": 2}
        yield {"sku": "B", "id": 8, "url": None, "version": "v1", "key": "k", "z": 3, "a": 4}
        yield {"sku": "s\\ud800", "t": "nul\\x00 lone\\udc80"}
        yield {"sku": "s\\\\ud800", "t": "spelled"}
"""


@pytest.fixture
def items_db(shop: Callable[..., ShopThread], tmp_path: Path) -> str:
    site = shop(listings=1, per_listing=1)
    spider = tmp_path / "items.py"
    spider.write_text(ITEMS_SPIDER)
    url = f"sqlite:///{tmp_path / 'items.db'}"
    crawled = run_cli("crawl", str(spider), "--db", url, "--start-url", f"{site.url}/list/0",
                      "--no-progress", "--set", "max_depth=0")  # fmt: skip
    assert crawled.returncode == 0, crawled.stderr
    return url


def test_an_export_holds_the_items_as_yielded_in_their_order(items_db: str) -> None:
    lines = run_cli("export", "--db", items_db).stdout.splitlines()
    rows = {r["sku"]: r for r in map(json.loads, lines)}
    assert list(rows["A"].items()) == [
        ("sku", "A"), ("id", 7), ("url", "mine"), ("version", "v9"), ("key", "k"), ("z", 1),
        ("a", 2),
    ]  # fmt: skip
    # keys and values an escape would confuse read back exactly, each its own record
    assert rows["s\ud800"] == {"sku": "s\ud800", "t": "nul\x00 lone\udc80"}
    assert rows["s\\ud800"] == {"sku": "s\\ud800", "t": "spelled"}
    with_meta = [
        json.loads(x)
        for x in run_cli("export", "--db", items_db, "--with-meta").stdout.splitlines()
    ]
    a = next(r for r in with_meta if r["sku"] == "A")
    assert (a["id"], a["url"], a["version"], a["key"]) == (7, "mine", "v9", "k")
    assert a["_crashsafe_key"] == "A" and a["_crashsafe_version"] == 1
    assert a["_crashsafe_url"].endswith("/list/0") and len(a["_crashsafe_id"]) == 32


def test_csv_from_the_extension_with_the_items_fields_and_escapes_said(
    items_db: str, tmp_path: Path
) -> None:
    out = tmp_path / "x.csv"
    written = run_cli("export", "--db", items_db, "-o", str(out), "--since", "1h")
    assert written.returncode == 0, written.stderr
    assert "wrote 4 record(s)" in written.stderr
    # the lone surrogates in a key (sku and _crashsafe_key) and in a value
    assert "3 CSV cell(s) held lone surrogates" in written.stderr
    rows = list(csv.DictReader(out.open(newline="")))
    header = list(rows[0])  # the union of the items' fields, each item's in its order
    a_fields = ["sku", "id", "url", "version", "key", "z", "a"]
    assert [f for f in header if f in a_fields] == a_fields
    assert "_crashsafe_gone_at" in rows[0]  # --since: a change feed has crashsafe's fields
    a = next(r for r in rows if r["sku"] == "A")
    assert (a["id"], a["url"], a["key"]) == ("7", "mine", "k")


def test_an_item_with_a_field_named_like_crashsafes_is_refused_at_the_yield(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=1)
    spider = tmp_path / "clash.py"
    spider.write_text(ITEMS_SPIDER.replace('"z": 1', '"_crashsafe_id": 1'))
    url = f"sqlite:///{tmp_path / 'clash.db'}"
    crawled = run_cli("crawl", str(spider), "--db", url, "--start-url", f"{site.url}/list/0",
                      "--no-progress", "--set", "max_depth=0")  # fmt: skip
    assert crawled.returncode == 1, crawled.stderr  # the one page failed: nothing stored
    failed = run_cli("failed", "--db", url).stdout
    assert "has a field '_crashsafe_id': fields named _crashsafe_* are crashsafe's own" in failed
    assert run_cli("export", "--db", url).stdout == ""


def test_crawl_o_run_again_rewrites_the_file_whole(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=3)
    out = tmp_path / "items.jsonl"
    args = ["crawl", "crashsafe.demo.spider:DemoShop", "--db", f"sqlite:///{tmp_path / 'o.db'}",
            "--start-url", f"{site.url}/list/0", "--no-progress", "-o", str(out)]  # fmt: skip
    for _ in range(2):  # a cron line run again as it is
        again = run_cli(*args)
        assert again.returncode == 0, again.stderr
        assert "wrote 3 record(s)" in again.stderr
        assert len(out.read_text().splitlines()) == 3
