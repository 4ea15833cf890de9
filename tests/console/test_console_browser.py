"""The console in a real browser (Debian's Chromium through Playwright, #27): it follows a
running crawl live, its Pause stops the site's requests and Resume completes the crawl
exactly, Retry group refetches those URLs, and markup in a record or an error is shown
as text and never runs."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

from crashsafe.demo.shop import ShopThread
from crashsafe.store import NewUrl, PageOutcome, RecordRow, open_store
from tests.console.conftest import screenshot
from tests.console.helpers import console
from tests.helpers import exported, get_json, reaped, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args

MARKUP = '<script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2">'


def status(db_url: str) -> dict[str, Any]:
    result = run_cli("status", "--db", db_url, "--json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    return row  # type: ignore[no-any-return]


def shown(page: Any, count: str) -> int:
    """A count as the page shows it (``done``, ``leased``...)."""
    text = page.locator(f'[data-crawl="demo-shop"] [data-count="{count}"] b').inner_text()
    return int(text.replace(",", ""))


def test_the_page_follows_a_crawl_and_pause_and_resume_steer_it(
    page: Any, shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=10, per_listing=20, latency_ms=100)  # 210 pages: 10 s at least
    with reaped(start_cli(*crawl_args(site, db_url, "--concurrency", "2"))) as crawl:
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 5)
        with console(db_url) as c:
            page.goto(c.url)
            card = page.locator('[data-crawl="demo-shop"]')
            card.locator('[data-state="running"]').wait_for()
            first = shown(page, "done")
            wait_for(lambda: shown(page, "done") > first)  # live: no reload
            assert "pages per second" in card.locator("figcaption").inner_text()
            screenshot(page, "console-running")
            card.get_by_role("button", name="Pause", exact=True).click()
            card.locator('[data-state="paused"]').wait_for()
            wait_for(lambda: status(db_url)["leased"] == 0)
            drained = time.time()
            wait_for(lambda: shown(page, "leased") == 0)
            screenshot(page, "console-paused")
            resumed = time.time()
            card.get_by_role("button", name="Resume", exact=True).click()
            _, err = crawl.communicate(timeout=120)
            assert crawl.returncode == 0, err
            card.locator('[data-state="complete"]').wait_for()
            assert shown(page, "done") == 210
    log = get_json(f"{site.url}/log?since={drained}")
    assert [t for t, _, _ in log if t < resumed] == []  # nothing while it was paused
    assert get_json(f"{site.url}/stats")["repeated"] == 0
    truth = get_json(f"{site.url}/catalogue")
    assert {r["key"]: {"sku": r["key"], **r["data"]} for r in exported(db_url)} == truth


def test_retry_of_a_failed_group_refetches_those_urls(
    page: Any, shop: Callable[..., ShopThread], db_url: str
) -> None:
    # A fifth of the pages answer 500 to their first request; one attempt each: they fail.
    site = shop(listings=2, per_listing=20, error_rate=0.2, error_attempts=1)
    first = run_cli(*crawl_args(site, db_url, "--max-attempts", "1"))
    assert first.returncode == 4, first.stderr  # done, with URLs in the dead letter
    listed = run_cli("failed", "--db", db_url).stdout.splitlines()
    failed = [line.split("\t")[1] for line in listed if line.startswith("demo-shop\t")]
    assert failed and status(db_url)["failed"] == len(failed)
    with console(db_url) as c:
        page.goto(c.url)
        groups = page.locator("button.retry-group")
        groups.first.wait_for()
        dead_letter = page.locator('[data-crawl="demo-shop"]').inner_text()
        assert re.search(r"HTTP 50[03] \(gave up after 1 attempts\)", dead_letter), dead_letter
        assert "body: try again" in dead_letter  # the failed response's first bytes
        screenshot(page, "console-dead-letter")
        retried = time.time()
        page.locator("button.retry-one").first.click()  # one URL alone
        wait_for(lambda: status(db_url)["failed"] == len(failed) - 1)
        while (n := groups.count()) > 0:  # each group's button re-queues that group
            groups.first.click()
            wait_for(lambda n=n: groups.count() < n)  # (gone from the live page)
        wait_for(lambda: status(db_url)["failed"] == 0)
        assert status(db_url)["pending"] == len(failed)
        page.locator("#audit").get_by_text("retry", exact=True).first.wait_for()
    again = run_cli(*crawl_args(site, db_url, "--max-attempts", "3"))
    assert again.returncode == 0, again.stderr
    log = get_json(f"{site.url}/log?since={retried}")
    paths = [path for _, path, _ in log]
    for url in failed:  # fetched again, once each
        assert paths.count(url.removeprefix(site.url)) == 1, url
    truth = get_json(f"{site.url}/catalogue")
    assert {r["key"]: {"sku": r["key"], **r["data"]} for r in exported(db_url)} == truth


def test_markup_in_a_record_or_an_error_is_shown_as_text(page: Any, db_url: str) -> None:
    store = open_store(db_url)
    try:
        store.enqueue("demo-shop", [NewUrl("http://a.test/1"), NewUrl("http://a.test/2")])
        owner = store.register_worker("demo-shop")
        one, two = sorted(store.lease("demo-shop", owner, 2, 60), key=lambda x: x.url)
        record = RecordRow.build(
            id="r1", source="s", key=f"k-{MARKUP}", url=None, data={"name": MARKUP}
        )
        store.commit_pages(
            "demo-shop",
            [PageOutcome(one, "done", 200, records=[record]),
             PageOutcome(two, "failed", 500, f"HTTP 500; body: {MARKUP}")],
        )  # fmt: skip
    finally:
        store.close()
    with console(db_url) as c:
        page.goto(c.url)
        page.locator("button.retry-group").wait_for()
        page.fill("#record-q", "k-")
        page.get_by_role("button", name="Search").click()
        page.locator("pre.record-data").wait_for()
        assert json.loads(page.locator("pre.record-data").inner_text()) == {"name": MARKUP}
        assert MARKUP in page.locator("#records").inner_text()  # the key too
        assert MARKUP in page.locator('[data-crawl="demo-shop"]').inner_text()  # the error
        screenshot(page, "console-records")
        assert page.locator("#records script, #records img, #crawls script").count() == 0
        assert page.evaluate("window.pwned") is None


def test_a_records_versions_show_what_changed(
    page: Any, shop: Callable[..., ShopThread], db_url: str
) -> None:
    import dataclasses

    site = shop(listings=1, per_listing=20)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    site.shop.options = dataclasses.replace(site.shop.options, round=1)  # prices change
    assert run_cli("recrawl", "--db", db_url).returncode == 0
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    changed = [r for r in exported(db_url) if r["version"] == 2]
    assert changed, "round 1 changes some prices"
    key = changed[0]["key"]
    with console(db_url) as c:
        page.goto(c.url)
        page.fill("#record-q", key)
        page.get_by_role("button", name="Search").click()
        page.locator("button.versions").first.click()
        page.locator("#versions .changed").first.wait_for()
        text = page.locator("#versions").inner_text()
        assert f"Versions of {key}" in text and "record.updated" in text
        assert "~ price:" in text and "→" in text
        screenshot(page, "console-versions")
        page.get_by_role("button", name="Changes in the last pass").click()
        page.get_by_text("Changed since the last pass began").wait_for()
        feed = page.locator("#records").inner_text()
        assert all(r["key"] in feed for r in changed)  # every record that changed, and
        assert feed.count("\tchanged\t") == len(changed)  # only those (nothing new or gone)


def test_a_batch_job_on_the_page(page: Any, tmp_path: Any) -> None:
    demo = run_cli("batch", "demo", "--dir", str(tmp_path / "job"), timeout=300)
    assert demo.returncode == 0, demo.stderr
    checkpoint = str(tmp_path / "job" / "results.jsonl")
    with console(f"sqlite:///{tmp_path / 'none.db'}", "--checkpoint", checkpoint) as c:
        page.goto(c.url)
        answered = page.locator(f'[data-checkpoint="{checkpoint}"] [data-count="answered"] b')
        answered.wait_for()
        assert answered.inner_text() == "200"
        of = page.locator(f'[data-checkpoint="{checkpoint}"] [data-count="of"] b')
        assert of.inner_text() == "200"
        assert "positive" in page.locator("#batches").inner_text()
        for panel in ("#crawls", "#records-panel", "#audit-panel"):  # no crawl database
            assert not page.locator(panel).is_visible(), panel
        screenshot(page, "console-batch")
