"""Keys an escape would confuse (a lone surrogate and its spelled-out escape, NUL and its
spelled-out escape) among ordinary ones, under SIGKILL: every key ends stored once, with
its own data, and reads back exactly as it was yielded (issue #22 item 1)."""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from crashsafe.demo.shop import ShopThread
from crashsafe.store import open_store
from tests.helpers import get_json, reaped, run_cli, start_cli, wait_for
from tests.spiders.hostile_keys import TWINS, hostile_keys

SPIDER = str(Path(__file__).resolve().parents[1] / "spiders" / "hostile_keys.py") + ":HostileKeys"
KILLS = 10


@pytest.mark.slow
def test_colliding_keys_survive_ten_sigkills_each_once_with_its_own_data(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=10, per_listing=10, latency_ms=20)
    # A lease lost with its worker counts an attempt: the kills are the test's, not the
    # pages', so no page may be sent to the dead letter by them alone.
    args = ["crawl", SPIDER, "--db", any_db_url, "--start-url", f"{site.url}/list/0",
            "--no-progress", "--concurrency", "4", "--max-attempts", str(KILLS + 1)]  # fmt: skip
    rng = random.Random(22)
    landed = 0
    for _ in range(KILLS):
        # mid-crawl: after a seeded number of this run's own requests (about 45 of the
        # 110 pages in all), so a kill lands however busy the machine is
        target = get_json(f"{site.url}/stats")["requests"] + rng.randint(1, 8)
        with reaped(start_cli(*args)) as proc:
            wait_for(
                lambda t=target, p=proc: (
                    p.poll() is not None or get_json(f"{site.url}/stats")["requests"] >= t
                ),
                timeout=60,
            )
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                landed += 1
    assert landed == KILLS
    final = run_cli(*args)
    assert final.returncode == 0, final.stderr
    [status] = json.loads(run_cli("status", "--db", any_db_url, "--json").stdout)
    assert (status["done"], status["failed"]) == (110, 0)

    catalogue = get_json(f"{site.url}/catalogue")
    expected = {("hostile-keys", k): {"name": v["name"], "price": v["price"]}
                for k, v in catalogue.items()}  # fmt: skip
    for sku in catalogue:
        if int(sku.removeprefix("SKU-")) % 5 == 0:
            expected.update({("hostile-keys", k): v for k, v in hostile_keys(sku).items()})
            expected[("a", f"b:{sku}")] = {"source": "a"}
            expected[("a:b", sku)] = {"source": "a:b"}
    # Read back through the store, which keeps every text exactly (JSON itself reads a
    # split surrogate pair as the character it makes: export says so, and is tested apart)
    store = open_store(any_db_url, readonly=True)
    try:
        records = list(store.iter_records())
    finally:
        store.close()
    stored = {(r.source, r.key): r.data for r in records}
    missing, extra = expected.keys() - stored.keys(), stored.keys() - expected.keys()
    assert not missing and not extra, (sorted(missing), sorted(extra))
    assert len(records) == len(expected) == 100 + 20 * (len(TWINS) + 2)
    assert stored == expected
