"""The demo shop answers conditional requests (issue #29 item 1: what recrawls that cost
only what changed will be measured against)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from crashsafe.demo.shop import ShopOptions, ShopThread, discontinued, product
from tests.helpers import exported, get_json, run_cli


def get(url: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:  # (urllib raises for a 304)
        return exc.code, dict(exc.headers), exc.read()


def test_pages_carry_validators_and_answer_304_while_they_hold(
    shop: Callable[..., ShopThread],
) -> None:
    site = shop(listings=2, per_listing=5)
    url = f"{site.url}/product/SKU-00003"
    status, headers, body = get(url)
    assert status == 200 and product(3)["price"].encode() in body
    etag, modified = headers["ETag"], headers["Last-Modified"]
    assert etag.startswith('"') and modified.endswith("GMT")
    assert get(url, **{"If-None-Match": etag})[0] == 304
    assert get(url, **{"If-None-Match": f'"other", {etag}'})[0] == 304
    assert get(url, **{"If-Modified-Since": modified})[0] == 304
    # If-None-Match wins over If-Modified-Since (RFC 9110 13.1.3)
    assert get(url, **{"If-None-Match": '"other"', "If-Modified-Since": modified})[0] == 200
    stats = get_json(f"{site.url}/stats")
    assert stats["not_modified"] == 3
    assert stats["bytes"] == 2 * len(body)  # 304s send no body
    assert stats["requests"] == 5  # a 304 is a request like any other


def test_a_repricing_round_changes_exactly_the_validators_of_what_it_changed() -> None:
    before = ShopOptions(listings=5, per_listing=20)
    after = ShopOptions(listings=5, per_listing=20, round=1)
    with ShopThread(before) as old, ShopThread(after) as new:
        changed = same = 0
        for n in range(before.products):
            if discontinued(n, 1):
                continue
            path = f"/product/SKU-{n:05d}"
            etag = get(old.url + path)[1]["ETag"]
            status = get(new.url + path, **{"If-None-Match": etag})[0]
            moved = product(n, 1) != product(n, 0)
            assert status == (200 if moved else 304), (n, status)
            changed += moved
            same += not moved
    assert changed > 0 and same > 0


def test_page_weight_adds_kilobytes_the_demo_spider_ignores(
    shop: Callable[..., ShopThread], tmp_path: Path
) -> None:
    """``page_kb`` (``demo-site --page-kb``, benchmarks/recrawl.py) gives every page a real
    page's weight; the crawl finds the same products, and a 304 still holds."""
    plain, heavy = shop(listings=2, per_listing=5), shop(listings=2, per_listing=5, page_kb=20)
    for path in ("/list/0", "/product/SKU-00003"):
        small, big = get(plain.url + path)[2], get(heavy.url + path)[2]
        assert 20 * 1024 <= len(big) - len(small) <= 22 * 1024
    headers = get(f"{heavy.url}/product/SKU-00003")[1]
    assert get(f"{heavy.url}/product/SKU-00003", **{"If-None-Match": headers["ETag"]})[0] == 304
    before = get_json(f"{heavy.url}/stats")["requests"]
    db = f"sqlite:///{tmp_path / 'heavy.db'}"
    crawled = run_cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", db, "--no-progress",
                      "--start-url", f"{heavy.url}/list/0")  # fmt: skip
    assert crawled.returncode == 0, crawled.stderr
    catalogue = get_json(f"{heavy.url}/catalogue")
    assert {r["key"]: r["data"] for r in exported(db)} == {
        k: {"name": v["name"], "price": v["price"]} for k, v in catalogue.items()
    }
    assert get_json(f"{heavy.url}/stats")["requests"] - before == 2 + 10  # no help page
