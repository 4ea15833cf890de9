"""crashsafe deliver against a scripted local endpoint: signatures, stable ids, retries
with Retry-After, failures listed and replayed, 410 disabling the endpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook

import crashsafe
from crashsafe.demo.shop import ShopThread
from crashsafe.effects.webhooks import new_secret
from tests.helpers import reaped, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args

SCHEDULE = ["--retry-schedule", "0.05,0.05", "--timeout", "5"]


@dataclass
class Endpoint:
    """A webhook endpoint whose answers a test scripts: ``answer(id, attempt)`` gives
    ``(status, headers)``; every request is kept as ``(time, headers, body)``."""

    answer: Callable[[str, int], tuple[int, dict[str, str]]]
    url: str = ""
    hits: list[tuple[float, dict[str, str], bytes]] = field(default_factory=list)

    def attempts(self, msg_id: str) -> list[tuple[float, dict[str, str], bytes]]:
        return [h for h in self.hits if h[1]["webhook-id"] == msg_id]


@pytest.fixture
def endpoint() -> Iterator[Callable[..., Endpoint]]:
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Callable[[str, int], tuple[int, dict[str, str]]]) -> Endpoint:
        ep = Endpoint(answer)
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with lock:
                    ep.hits.append((time.time(), headers, body))
                    n = len(ep.attempts(headers["webhook-id"]))
                status, extra = ep.answer(headers["webhook-id"], n)
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        ep.url = f"http://127.0.0.1:{server.server_port}/hooks"
        return ep

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def crawled(shop: Callable[..., ShopThread], db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A crawl of 5 products (5 record.created events); the secret in the environment."""
    monkeypatch.setenv("CRASHSAFE_WEBHOOK_SECRET", SECRET)
    site = shop(listings=1, per_listing=5)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    return db_url


SECRET = new_secret()


def deliver(db_url: str, url: str, *extra: str) -> Any:
    return run_cli("deliver", "--db", db_url, "--webhook", url, *SCHEDULE, *extra)


def test_retries_keep_the_id_and_body_and_honour_retry_after(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    ep = endpoint(lambda _id, n: (503, {"Retry-After": "1"}) if n == 1 else (200, {}))
    done = deliver(crawled, ep.url)
    assert done.returncode == 0, done.stderr
    assert "delivered 5, failed 0 (retries spent), 5 attempts to be retried" in done.stderr
    ids = {h[1]["webhook-id"] for h in ep.hits}
    assert len(ids) == 5 and len(ep.hits) == 10
    verifier = Webhook(SECRET)
    for msg_id in ids:
        first, second = ep.attempts(msg_id)
        assert first[2] == second[2]  # the same body: the same event
        assert second[0] - first[0] >= 1.0  # Retry-After: 1, not the 0.05 s schedule
        event = verifier.verify(second[2], second[1])
        assert event["type"] == "record.created" and event["data"]["version"] == 1
    assert deliver(crawled, ep.url).stderr.startswith("delivered 0")  # nothing left


def test_failed_deliveries_are_listed_and_replayed(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    healthy = False
    ep = endpoint(lambda _id, n: (200, {}) if healthy else (500, {}))
    failing = deliver(crawled, ep.url)
    assert failing.returncode == 4  # done, with deliveries left in the dead letter
    assert "failed 5" in failing.stderr and "5 attempts: HTTP 500" in failing.stderr
    assert len(ep.hits) == 15  # three attempts each: the first and two retries
    listed = run_cli("deliver", "--db", crawled, "--failed")
    assert listed.stdout.count("3 attempts: HTTP 500 (gave up after 3 attempts)") == 5
    assert run_cli("deliver", "--db", crawled, "--replay").stdout.endswith(
        "5 failed deliveries queued again\n"
    )
    healthy = True
    done = deliver(crawled, ep.url)
    assert done.returncode == 0 and "5 delivered, 0 pending, 0 failed" in done.stderr


def test_a_receiver_that_is_down_leaves_deliveries_failing_and_the_exit_says_so(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    # (#23 item 3: the run ended 0 while every delivery waited for a retry hours away)
    ep = endpoint(lambda _id, n: (503, {}))
    down = run_cli("deliver", "--db", crawled, "--webhook", ep.url,
                   "--retry-schedule", "1h", "--max-wait", "1s")  # fmt: skip
    assert down.returncode == 4, down.stderr
    assert "5 attempts failed in this run and wait for a retry" in down.stderr
    assert "The next retry is due in" in down.stderr


def test_410_disables_the_endpoint_until_replay(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    gone = True
    ep = endpoint(lambda _id, n: (410, {}) if gone else (200, {}))
    first = deliver(crawled, ep.url, "--concurrency", "1")
    assert first.returncode == 1 and "endpoint disabled" in first.stderr
    assert len(ep.hits) == 1  # nothing more was sent once it said 410
    again = deliver(crawled, ep.url)
    assert again.returncode == 1 and "answered 410 Gone" in again.stderr
    assert len(ep.hits) == 1
    gone = False
    assert run_cli("deliver", "--db", crawled, "--replay").returncode == 0
    done = deliver(crawled, ep.url)
    assert done.returncode == 0 and "5 delivered, 0 pending" in done.stderr


def test_bad_secret_and_missing_webhook_are_one_line_errors(crawled: str) -> None:
    bad = run_cli("deliver", "--db", crawled, "--webhook", "http://127.0.0.1:9/", "--secret", "x")
    assert bad.returncode == 1 and "whsec_" in bad.stderr and "Traceback" not in bad.stderr
    none = run_cli("deliver", "--db", crawled)
    assert none.returncode == 1 and "--webhook" in none.stderr


def test_a_mistyped_endpoint_does_not_fail_the_good_one_and_can_be_removed(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    dead = "http://127.0.0.1:9/nobody-listens"
    assert deliver(crawled, dead).returncode == 4  # every attempt refused: failed
    ep = endpoint(lambda _id, n: (200, {}))
    good = deliver(crawled, ep.url)
    assert good.returncode == 0, good.stderr
    assert "to this endpoint in all: 5 delivered, 0 pending, 0 failed" in good.stderr
    removed = run_cli("deliver", "--db", crawled, "--webhook", dead, "--remove")
    assert removed.stdout.strip().endswith(f"endpoint {dead} and its 5 deliveries removed")
    assert (
        run_cli("deliver", "--db", crawled, "--failed")
        .stdout.strip()
        .endswith("no failed delivery")
    )
    again = run_cli("deliver", "--db", crawled, "--webhook", dead, "--remove")
    assert again.returncode == 1 and "has no endpoint" in again.stderr


def test_bad_webhook_urls_and_numbers_are_refused(crawled: str) -> None:
    for url in ["http://127.0.0.1:99999/x", "http://[::1/x", "ftp://127.0.0.1/"]:
        bad = run_cli("deliver", "--db", crawled, "--webhook", url)
        assert bad.returncode == 1 and "give an http:// or https:// URL" in bad.stderr, url
    for option in ["--timeout", "--lease-seconds"]:
        bad = run_cli("deliver", "--db", crawled, "--webhook", "http://127.0.0.1:9/", option, "nan")
        assert bad.returncode == 2 and "finite" in bad.stderr


def test_an_event_beyond_orjson_is_sent_and_read_whole(
    shop: Callable[..., ShopThread],
    db_url: str,
    endpoint: Callable[..., Endpoint],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRASHSAFE_WEBHOOK_SECRET", SECRET)

    class Big(crashsafe.Spider):
        name = "big"

        def parse(self, page: crashsafe.Page) -> Iterator[Any]:
            nested: dict[str, Any] = {}
            inner = nested
            for _ in range(300):
                inner["a"] = {}
                inner = inner["a"]
            yield crashsafe.Record(key="k", data={"n": 10**30, "deep": nested})

    site = shop(listings=1, per_listing=1)
    crashsafe.crawl(Big, db=db_url, start_urls=[f"{site.url}/list/0"])
    ep = endpoint(lambda _id, n: (200, {}))
    done = deliver(db_url, ep.url)
    assert done.returncode == 0, done.stderr
    [(_, headers, body)] = ep.hits
    assert Webhook(SECRET).verify(body, headers)["data"]["data"]["n"] == 10**30


def test_deliver_on_postgresql(
    shop: Callable[..., ShopThread],
    pg_url: str,
    endpoint: Callable[..., Endpoint],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRASHSAFE_WEBHOOK_SECRET", SECRET)
    site = shop(listings=1, per_listing=5)
    assert run_cli(*crawl_args(site, pg_url)).returncode == 0
    ep = endpoint(lambda _id, n: (503, {}) if n == 1 else (200, {}))
    done = deliver(pg_url, ep.url)
    assert done.returncode == 0, done.stderr
    assert "to this endpoint in all: 5 delivered, 0 pending, 0 failed" in done.stderr
    verifier = Webhook(SECRET)
    versions = {verifier.verify(body, headers)["data"]["id"] for _, headers, body in ep.hits}
    assert len(versions) == 5 and len(ep.hits) == 10


def test_a_following_dispatcher_stops_when_its_endpoint_is_removed(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    ep = endpoint(lambda _id, n: (200, {}))
    with reaped(start_cli("deliver", "--db", crawled, "--webhook", ep.url, "--follow")) as proc:
        wait_for(lambda: len(ep.hits) >= 5)
        assert run_cli("deliver", "--db", crawled, "--webhook", ep.url, "--remove").returncode == 0
        assert run_cli("deliver", "--db", crawled, "--webhook", ep.url).returncode == 0  # again
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "the endpoint was removed" in err


def test_ctrl_c_cuts_a_hanging_call_short_and_gives_its_deliveries_back(
    crawled: str, endpoint: Callable[..., Endpoint]
) -> None:
    import json
    import signal
    import threading

    released = threading.Event()

    def hang(_id: str, n: int) -> tuple[int, dict[str, str]]:
        released.wait(120)  # a receiver that never answers (until the test ends)
        return 200, {}

    ep = endpoint(hang)
    try:
        cmd = ["deliver", "--db", crawled, "--webhook", ep.url, "--timeout", "300"]
        with reaped(start_cli(*cmd)) as proc:
            wait_for(lambda: len(ep.hits) == 4)  # --concurrency 4: four calls hang
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)  # (not the 300 s of --timeout)
        assert proc.returncode == 130 and "giving back the deliveries in flight" in err
    finally:
        released.set()
    [row] = json.loads(run_cli("status", "--db", crawled, "--json").stdout)
    assert row["effects"]["deliveries"] == {"pending": 5}  # none left leased
