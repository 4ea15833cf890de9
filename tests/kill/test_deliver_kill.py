"""SIGKILL the webhook dispatcher during delivery: a real receiver (examples/
webhook_receiver.py) processes each (record, version) exactly once, before and after a
recrawl that changed prices."""

from __future__ import annotations

import dataclasses
import json
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crashsafe.demo.shop import ShopThread
from crashsafe.effects.webhooks import new_secret
from tests.helpers import get_json, reaped, run_cli, start_cli, wait_for, wait_for_line
from tests.integration.test_cli import crawl_args

pytestmark = pytest.mark.slow
RECEIVER = Path(__file__).parents[2] / "examples" / "webhook_receiver.py"
KILLS = 3


@pytest.fixture
def receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """The example receiver on a free port: its URL and its database."""
    monkeypatch.setenv("CRASHSAFE_WEBHOOK_SECRET", new_secret())
    db = tmp_path / "received.db"
    proc = subprocess.Popen(
        [sys.executable, str(RECEIVER), "--db", str(db), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    with reaped(proc):
        assert proc.stdout is not None
        url = wait_for_line(proc.stdout, "/hooks").split()[-1]
        yield url, db
        proc.send_signal(signal.SIGINT)


def deliver_args(db_url: str, hook: str) -> list[str]:
    # One at a time, so that the kills land while deliveries are in flight; short leases
    # and retries, so the run after a kill does not wait long for the killed one's.
    return ["deliver", "--db", db_url, "--webhook", hook, "--concurrency", "1", "--timeout",
            "2", "--lease-seconds", "3", "--retry-schedule", "0.1,0.2,0.4"]  # fmt: skip


def deliver_with_kills(db_url: str, hook: str, events: int) -> None:
    """Start the dispatcher, SIGKILL it once the receiver got a share more; then finish."""
    before = get_json(hook)["processed"]
    for k in range(1, KILLS + 1):
        target = before + events * k // (KILLS + 1)
        with reaped(start_cli(*deliver_args(db_url, hook))) as proc:

            def got_share(proc: subprocess.Popen[str] = proc, target: int = target) -> bool:
                return proc.poll() is not None or get_json(hook)["processed"] >= target

            wait_for(got_share, timeout=60)
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
    done = run_cli(*deliver_args(db_url, hook))
    assert done.returncode == 0, done.stderr
    assert "0 pending, 0 failed" in done.stderr


def processed(db: Path) -> Counter[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return Counter(conn.execute("SELECT record_id, version FROM changes"))


def outbox(db_url: str) -> set[tuple[str, int]]:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        return set(conn.execute("SELECT record_id, version FROM outbox"))


def test_a_killed_dispatcher_delivers_each_record_version_once(
    shop: Callable[..., ShopThread], db_url: str, receiver: tuple[str, Path]
) -> None:
    hook, received = receiver
    site = shop(listings=4, per_listing=25)
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    deliver_with_kills(db_url, hook, 100)
    counts = processed(received)
    assert set(counts) == outbox(db_url) and len(counts) == 100
    assert max(counts.values()) == 1  # a repeat was answered, never processed again

    # A recrawl after prices changed: only the new versions are sent, each once.
    site.shop.options = dataclasses.replace(site.shop.options, round=1)
    assert run_cli("recrawl", "--db", db_url).returncode == 0
    assert run_cli(*crawl_args(site, db_url)).returncode == 0
    changed = len(outbox(db_url)) - 100
    assert changed > 0
    deliver_with_kills(db_url, hook, changed)
    counts = processed(received)
    assert set(counts) == outbox(db_url) and max(counts.values()) == 1
    seen = get_json(hook)
    assert seen["processed"] == 100 + changed <= seen["webhooks"]
    [status] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert status["effects"]["deliveries"] == {"delivered": 100 + changed}
