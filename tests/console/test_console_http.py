"""The console over HTTP (#27): /metrics agrees with `status --json` while four workers
run, actions are the store's (and audited), and the console keeps to itself: its own
address, a token when asked for one, CSRF on every action, read-only when told."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from crashsafe.demo.shop import ShopThread
from tests.console.helpers import Console, console, parse_metrics, total
from tests.helpers import get_json, reaped, run_cli, start_cli, wait_for, wait_for_line
from tests.integration.test_cli import crawl_args


def status(db_url: str) -> dict[str, Any]:
    result = run_cli("status", "--db", db_url, "--json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    return row  # type: ignore[no-any-return]


def metrics(c: Console, **headers: str) -> dict[str, float]:
    code, text = c.get("/metrics", headers)
    assert code == 200, text
    return parse_metrics(text)


def agree(c: Console, db_url: str, alive: int) -> None:
    """/metrics (a fresh snapshot) against `status --json`, on a crawl that stands still."""
    row = status(db_url)
    wait_for(lambda: metrics(c)['crashsafe_urls{crawl="demo-shop",state="done"}'] == row["done"])
    m = metrics(c)
    for state in ("pending", "leased", "done", "failed"):
        assert m[f'crashsafe_urls{{crawl="demo-shop",state="{state}"}}'] == row[state], state
    assert m['crashsafe_records{crawl="demo-shop",state="live"}'] == row["records"]
    assert m['crashsafe_records{crawl="demo-shop",state="gone"}'] == row["effects"]["gone"]
    assert m['crashsafe_requests{crawl="demo-shop",kind="total"}'] == row["requests"]
    assert m['crashsafe_requests{crawl="demo-shop",kind="repeated"}'] == row["repeated"]
    assert m['crashsafe_workers{alive="true",crawl="demo-shop"}'] == alive
    assert sum(w["alive"] for w in row["workers"]) == alive


def test_metrics_equal_status_while_four_workers_run(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    # 210 pages, four workers of one request each, 200 ms a page: 10 s at least. Paused
    # from a shell after its first requests, it then stands still while the four workers
    # wait, however long the console takes to start on a busy machine.
    site = shop(listings=10, per_listing=20, latency_ms=200)
    args = crawl_args(site, any_db_url, "--workers", "4", "--concurrency", "1")
    with reaped(start_cli(*args)) as crawl:
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 8)
        assert run_cli("pause", "--db", any_db_url, "--by", "tester").returncode == 0
        with console(any_db_url) as c:
            wait_for(lambda: sum(w["alive"] for w in c.crawl()["workers"]) == 4)
            wait_for(lambda: status(any_db_url)["leased"] == 0)
            assert c.crawl()["state"] == "paused" and c.crawl()["paused"]["by"] == "tester"
            assert status(any_db_url)["done"] < 210  # (paused well before the end)
            agree(c, any_db_url, alive=4)
            assert metrics(c)['crashsafe_paused{crawl="demo-shop"}'] == 1
            code, said = c.post("/api/resume", {"crawl": "demo-shop"})
            assert code == 200 and json.loads(said)["changed"] is True, said
            _, err = crawl.communicate(timeout=180)
            assert crawl.returncode == 0, err
            agree(c, any_db_url, alive=0)
            assert c.crawl()["state"] == "complete"
            audit = c.state()["audit"]
            assert [(a["action"], a["actor"]) for a in audit[:2]] == [
                ("resume", "console@127.0.0.1"),
                ("pause", "tester"),
            ]
    assert get_json(f"{site.url}/stats")["repeated"] == 0


def test_actions_need_the_pages_csrf_token_and_its_origin(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=1, per_listing=2)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    with console(db_url) as c:
        path, crawl = "/api/pause", {"crawl": "demo-shop"}
        assert c.post(path, crawl, csrf=None)[0] == 403
        assert c.post(path, crawl, csrf="guessed")[0] == 403
        assert c.post(path, crawl, csrf="\xff")[0] == 403  # (a byte no UTF-8 holds)
        assert c.post(path, crawl, Origin="http://evil.example")[0] == 403
        assert not c.crawl()["paused"]  # none of those did anything
        assert c.post(path, crawl, Origin=c.url)[0] == 200
        assert c.crawl()["paused"]["by"] == "console@127.0.0.1"
        for bad in ("not an origin", "http://[::1", "http://a.test:99999", "http://a\x00b"):
            code, said = c.post(path, {**crawl, "origin": bad})
            assert code == 400 and "give scheme://host[:port]" in said, bad
        assert c.post(path, {"crawl": "nope"})[0] == 400
        assert c.post(path, ["not", "an", "object"])[0] == 400
        assert c.post("/api/explode", crawl)[0] == 404
        # Reached through another name (DNS rebinding): not answered at all.
        assert c.get("/api/state", {"Host": "evil.example"})[0] == 421
        # Every answer forbids other scripts, framing and sniffing.
        import urllib.request

        with urllib.request.urlopen(c.url + "/", timeout=10) as resp:
            csp = resp.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert resp.headers["X-Frame-Options"] == "DENY"


def test_a_token_guards_every_request(shop: Callable[..., ShopThread], db_url: str) -> None:
    site = shop(listings=1, per_listing=2)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    with console(db_url, "--token", "s3cret-token-of-23-chars") as c:
        assert c.get("/api/state")[0] == 401
        assert c.get("/metrics")[0] == 401
        assert c.get("/metrics", {"Authorization": "Bearer wrong"})[0] == 401
        bearer = {"Authorization": "Bearer s3cret-token-of-23-chars"}
        assert "crashsafe_urls" in c.get("/metrics", bearer)[1]
        assert c.get("/login?token=wrong")[0] == 401
    refused = run_cli("ui", "--db", db_url, "--host", "0.0.0.0", "--port", "0")
    assert refused.returncode == 1 and "give --token" in refused.stderr
    short = run_cli("ui", "--db", db_url, "--host", "0.0.0.0", "--port", "0", "--token", "a")
    assert short.returncode == 1 and "at least 16 are needed" in short.stderr


def test_login_sets_a_cookie_that_lets_the_page_in(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    import http.cookiejar
    import urllib.request

    site = shop(listings=1, per_listing=2)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    with console(db_url, "--token", "s3cret-token-of-23-chars") as c:
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        with opener.open(f"{c.url}/login?token=s3cret-token-of-23-chars", timeout=10) as resp:
            assert resp.url == f"{c.url}/" and "crashsafe-csrf" in resp.read().decode()
        [cookie] = list(jar)
        assert cookie.has_nonstandard_attr("HttpOnly")
        # not the token: a browser sends the host's cookies to its every port
        assert cookie.value and "s3cret" not in (cookie.value or "")
        with opener.open(f"{c.url}/api/state", timeout=10) as resp:
            assert json.load(resp)["crawls"][0]["name"] == "demo-shop"


def test_read_only_shows_and_never_acts(shop: Callable[..., ShopThread], db_url: str) -> None:
    site = shop(listings=1, per_listing=2, error_rate=1.0, error_attempts=9)
    args = crawl_args(site, db_url, "--max-attempts", "1")
    assert run_cli(*args).returncode == 1  # every page failed
    with console(db_url, "--read-only") as c:
        [group] = c.crawl()["failed_groups"]
        assert group["count"] == 1 and group["error"] == "HTTP 500 (gave up after 1 attempts)"
        assert "body: try again" in group["example_error"]  # the response's first bytes
        assert c.post("/api/retry", {"crawl": "demo-shop"})[0] == 403
        assert c.post("/api/pause", {"crawl": "demo-shop"})[0] == 403
        assert 'content="true"' in c.get("/")[1]
    assert status(db_url)["failed"] == 1 and status(db_url).get("paused") is None


def test_batch_jobs_are_shown_from_their_checkpoints(tmp_path: Any) -> None:
    demo = run_cli("batch", "demo", "--dir", str(tmp_path / "job"), timeout=300)
    assert demo.returncode == 0, demo.stderr
    checkpoint = tmp_path / "job" / "results.jsonl"
    missing = tmp_path / "not-yet.jsonl"
    report = run_cli("batch", "report", str(checkpoint), "--format", "json")
    assert report.returncode == 0, report.stderr
    # No crawl database here: the console shows the batch jobs alone.
    nowhere = f"sqlite:///{tmp_path / 'none.db'}"
    with console(nowhere, "--checkpoint", str(checkpoint), "--checkpoint", str(missing)) as c:
        job, later = c.state()["batches"]
        assert later["error"].startswith("no such file yet")
        assert job["items"] == 200 and job["batches"] >= 20 and job["failed_not_done"] == 0
        assert job["total"] == 200 and job["eta"] is None  # done: nothing left to wait for
        assert sum(job["labels"].values()) == 200
        assert set(job["labels"]) <= {"positive", "negative", "neutral"}
        assert job["usage"]["prompt_tokens"] > 0 and job["cost"] > 0
        assert c.state()["crawls"] == []
        for path in ("/api/records?crawl=x&q=y", "/api/changes?crawl=x",
                     "/api/records/versions?crawl=x&id=y"):  # fmt: skip
            code, said = c.get(path)
            assert code == 400 and "batch jobs only" in said, path
        assert c.post("/api/pause", {"crawl": "x"})[0] == 400
    summary = json.loads(report.stdout)["summary"]
    assert (summary["items"], summary["labels"]) == (job["items"], job["labels"])  # as it says


def test_ctrl_c_stops_the_console_while_a_page_is_open(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    import signal
    import urllib.request

    site = shop(listings=1, per_listing=2)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    with reaped(start_cli("ui", "--db", db_url, "--port", "0")) as proc:
        said = wait_for_line(proc.stderr, "Ctrl-C stops it")
        port = said.split("http://127.0.0.1:")[1].split("/")[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/events", timeout=30) as events:
            assert events.readline().startswith(b"data: ")  # a page is watching
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)  # (it waited for the page to go away, for ever)
        assert proc.returncode == 0 and "console stopped" in proc.stderr.read()


def test_the_console_answers_to_its_own_address_in_ipv6_form_too() -> None:
    from crashsafe.console.guard import Guard

    guard = Guard(host="::1", token=None)
    guard.bound(8765)
    assert guard.hosts == {"[::1]:8765", "localhost:8765", "127.0.0.1:8765"}


def test_deliveries_per_endpoint_with_its_secrets_masked(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    from crashsafe.store import open_store

    site = shop(listings=1, per_listing=5)
    assert run_cli(*crawl_args(site, any_db_url)).returncode == 0
    store = open_store(any_db_url)
    try:  # two endpoints: each gets the crawl's whole outbox as its backlog
        store.endpoint("demo-shop", "http://127.0.0.1:9/hook?token=s3cret")
        store.endpoint("demo-shop", "http://127.0.0.1:9/other")
        slack = "http://127.0.0.1:9/services/T0A1B2C3D/B0A1B2C3D/Xk39fjW0aPq7Lm2zR8sT5vYc"
        store.endpoint("demo-shop", slack + "?api_key=AK-123&sig=SAS-456&code=FUNC-789")
    finally:
        store.close()
    row = status(any_db_url)
    with console(any_db_url) as c:
        m = metrics(c)
        from crashsafe.text import shown_endpoint

        shown = shown_endpoint("http://127.0.0.1:9/hook?token=s3cret")
        assert shown.startswith("http://127.0.0.1:9/hook?token=***#")  # (+ a short hash)
        hook = f'crashsafe_deliveries{{crawl="demo-shop",endpoint="{shown}",'

        assert m[hook + 'state="pending"}'] == row["records"] == 5
        for secret in ("s3cret", "Xk39fjW0", "AK-123", "SAS-456", "FUNC-789", "T0A1B2C3D"):
            assert secret not in c.get("/metrics")[1] and secret not in c.get("/api/state")[1]
        pending = total(m, "crashsafe_deliveries{") - sum(
            v for k, v in m.items() if k.startswith("crashsafe_deliveries{") and "pending" not in k
        )
        assert pending == row["effects"]["deliveries"]["pending"] == 15
        urls = [e["url"] for e in c.crawl()["endpoints"]]
        assert [u.partition("#")[0] for u in urls] == [
            "http://127.0.0.1:9/hook?token=***",
            "http://127.0.0.1:9/other",
            "http://127.0.0.1:9/services/***/***/***?api_key=***&sig=***&code=***",
        ]
        assert urls[1] == "http://127.0.0.1:9/other" and len(set(urls)) == 3


def test_the_rate_chart_starts_with_the_last_hour_from_the_rows(any_db_url: str) -> None:
    db_url = any_db_url
    import time

    from crashsafe.store import NewUrl, PageOutcome, open_store

    half_an_hour_ago = time.time() - 1800
    store = open_store(db_url, clock=lambda: half_an_hour_ago)  # pages done back then
    try:
        store.enqueue("demo-shop", [NewUrl(f"http://a.test/{i}") for i in range(30)])
        leases = store.lease("demo-shop", store.register_worker("demo-shop"), 30, 60)
        store.commit_pages("demo-shop", [PageOutcome(x, "done", 200) for x in leases])
    finally:
        store.close()
    with console(db_url) as c:
        rate = c.crawl()["rate"]  # at once: read from the rows, not sampled since
    assert max(p["per_second"] for p in rate) == 0.5  # 30 pages in that minute
    assert sum(p["per_second"] for p in rate) * 60 == 30  # and none in any other


def test_retry_group_requeues_a_group_whose_messages_differ_in_their_values(
    tmp_path: Any,
) -> None:
    """Three pages failed with one error but other values, one with another error: two
    groups; the first is shown as its pattern, and Retry group re-queues its three URLs.
    `failed --group` shows the same groups."""
    from crashsafe.store import NewUrl, PageOutcome, open_store

    db_url = f"sqlite:///{tmp_path / 'x.db'}"
    store = open_store(db_url)
    try:
        store.enqueue("c", [NewUrl(f"http://a.test/{i}") for i in range(4)])
        leases = sorted(store.lease("c", store.register_worker("c"), 4, 60), key=lambda x: x.url)
        bad = "ValueError: could not convert string to float: "
        errors = [f"{bad}'12,99'", f"{bad}'n/a'", f"{bad}'-'", "KeyError: 'price'"]
        store.commit_pages(
            "c",
            [PageOutcome(lease, "failed", 200, e) for lease, e in zip(leases, errors, strict=True)],
        )
    finally:
        store.close()
    grouped = run_cli("failed", "--db", db_url, "--group")
    assert grouped.returncode == 0, grouped.stderr
    lines = grouped.stdout.splitlines()
    assert lines[0] == f"      3  {bad}'…'  (e.g. http://a.test/0)"
    assert lines[1] == "      1  KeyError: 'price'  (e.g. http://a.test/3)"
    with console(db_url) as c:
        first, second = c.crawl("c")["failed_groups"]
        assert (first["count"], first["error"]) == (3, f"{bad}'…'")
        assert (second["count"], second["error"]) == (1, "KeyError: 'price'")
        assert first["key"] == f"{bad}'…'" and second["key"] == "KeyError: 'price'"
        code, body = c.post("/api/retry", {"crawl": "c", "error": first["key"]})
        assert code == 200 and json.loads(body)["requeued"] == 3, body
    left = run_cli("failed", "--db", db_url).stdout
    assert "http://a.test/3" in left and "1 failed URL(s)" in left
