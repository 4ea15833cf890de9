"""Recrawl after the shop changed: exactly the changed records get a new version and are
in the change feed; discontinued products are gone. Run as a user runs it, on both
backends."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from crashsafe.demo.shop import ShopThread, discontinued, product, sku
from tests.helpers import exported, run_cli
from tests.integration.test_cli import crawl_args


def test_recrawl_finds_exactly_the_changed_prices_and_the_gone_products(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=5, per_listing=20)
    first = run_cli(*crawl_args(site, any_db_url))
    assert first.returncode == 0, first.stderr
    assert "this run: 105 requests, 100 new records, 0 changed" in first.stderr

    again = run_cli(*crawl_args(site, any_db_url))  # nothing queued: nothing fetched
    assert "this run: 0 requests, 0 new records, 0 changed" in again.stderr
    nothing = run_cli("export", "--db", any_db_url, "--since", "last-pass")
    assert nothing.returncode == 1 and "no recrawl" in nothing.stderr

    site.shop.options = dataclasses.replace(site.shop.options, round=1)
    changed = {sku(n) for n in range(100) if product(n, 1) != product(n)}
    gone = {sku(n) for n in range(100) if discontinued(n, 1)}
    changed -= gone
    assert changed and gone  # round 1 changes something in 100 products

    queued = run_cli("recrawl", "--db", any_db_url)
    assert queued.returncode == 0, queued.stderr
    assert "pass 2 begun, 105 pages queued again" in queued.stdout
    second = run_cli(*crawl_args(site, any_db_url))
    assert second.returncode == 0, second.stderr
    assert (
        f"this run: 105 requests, 0 new records, {len(changed)} changed, {len(gone)} gone"
        in second.stderr
    )

    feed = exported(any_db_url, "--since", "last-pass", "--changed-only")
    rows = {r["key"]: r for r in feed}
    assert set(rows) == changed | gone
    for key in changed:
        n = int(key.removeprefix("SKU-"))
        assert rows[key]["version"] == 2 and "gone_at" not in rows[key]
        assert rows[key]["data"]["price"] == product(n, 1)["price"]
    assert all(rows[key]["version"] == 2 and rows[key]["gone_at"] for key in gone)

    live = exported(any_db_url)
    assert len(live) == 100 - len(gone)
    assert all(r["version"] == 1 for r in live if r["key"] not in changed)

    [status] = json.loads(run_cli("status", "--db", any_db_url, "--json").stdout)
    effects = status["effects"]
    assert (effects["passes"], effects["gone"]) == (2, len(gone))
    assert effects["changed_last_pass"] == len(changed) + len(gone)
    assert effects["events"] == 100 + len(changed) + len(gone)
    assert status["records"] == 100 - len(gone)
    assert "passes, versions" in run_cli("status", "--db", any_db_url, "--wide").stdout
    compact = run_cli("status", "--db", any_db_url).stdout
    assert "passes    2, the last begun" in compact and f"{len(gone)} gone" in compact

    # every version, oldest first: a changed product's two prices, a gone one's end
    one, off = sorted(changed)[0], sorted(gone)[0]
    out = run_cli("history", "--db", any_db_url, "--key", one, "--key", off)
    assert out.returncode == 0, out.stderr
    assert "wrote 4 version(s) of 2 record(s) to stdout" in out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    n = int(one.removeprefix("SKU-"))
    by_key = {key: [r for r in rows if r["_crashsafe_key"] == key] for key in (one, off)}
    assert [(r["_crashsafe_version"], r["_crashsafe_event"], r["price"]) for r in by_key[one]] == [
        (1, "created", product(n)["price"]),
        (2, "updated", product(n, 1)["price"]),
    ]
    assert [(r["_crashsafe_version"], r["_crashsafe_event"]) for r in by_key[off]] == [
        (1, "created"),
        (2, "gone"),
    ]
    missing = run_cli("history", "--db", any_db_url, "--key", "SKU-nope")
    assert missing.returncode == 1 and "no record with the key SKU-nope" in missing.stderr
    partly = run_cli("history", "--db", any_db_url, "--key", one, "--key", "SKU-nope")
    assert partly.returncode == 0, partly.stderr
    assert "no record with the key SKU-nope" in partly.stderr
    assert "wrote 2 version(s) of 1 record(s)" in partly.stderr
