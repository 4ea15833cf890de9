"""Webhooks: signatures any Standard Webhooks library accepts, stable ids and bodies,
retry timing, and a receiver that processes each id exactly once, even when killed."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import random
import shlex
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from standardwebhooks.webhooks import Webhook

from crashsafe.effects.receiver import Receiver, WebhookRejected
from crashsafe.effects.webhooks import (
    MAKE_SECRET,
    MAX_RETRY_AFTER,
    SPEC_DELAYS,
    RetrySchedule,
    Signer,
    classify,
    event_body,
    event_id,
    new_secret,
    parse_retry_after,
)
from crashsafe.errors import ConfigError
from tests.helpers import reaped, wait_for

# The example of the Standard Webhooks reference libraries' tests.
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TIMESTAMP = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

SECRET = new_secret()


def body_of(i: int, crawl: str = "shop") -> tuple[str, bytes]:
    record = f"r{i}"
    body = event_body(
        kind="record.created",
        crawl=crawl,
        record_id=record,
        version=1,
        url=f"https://shop.test/p/{i}",
        data={"price": i},
        written_at=1_700_000_000 + i,
    )
    return event_id(crawl, record, 1, "record.created"), body


def log_record(payload: dict[str, Any], conn: sqlite3.Connection) -> None:
    """The user's effect: one row per processing, so processing twice shows."""
    conn.execute("INSERT INTO log (record) VALUES (?)", (payload["data"]["id"],))


def with_log(path: Path) -> Receiver:
    receiver = Receiver(SECRET, path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS log (record TEXT NOT NULL)")
        conn.execute("CREATE TABLE IF NOT EXISTS scratch (n INTEGER)")
        conn.commit()
    finally:
        conn.close()
    return receiver


def rows(path: Path, sql: str) -> list[Any]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute(sql)]
    finally:
        conn.close()


# -- signing -----------------------------------------------------------------------------


def test_the_spec_example_signs_to_the_published_signature() -> None:
    headers = Signer(SPEC_SECRET).headers(SPEC_ID, SPEC_BODY, SPEC_TIMESTAMP + 0.9)
    assert headers == {
        "content-type": "application/json",
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TIMESTAMP),
        "webhook-signature": SPEC_SIGNATURE,
    }
    # The same by hand, from the spec's text alone.
    key = base64.b64decode(SPEC_SECRET.removeprefix("whsec_"))
    signed = f"{SPEC_ID}.{SPEC_TIMESTAMP}.".encode() + SPEC_BODY
    by_hand = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert headers["webhook-signature"] == f"v1,{by_hand}"


def test_the_reference_library_verifies_what_we_sign() -> None:
    msg_id, body = body_of(1)
    headers = Signer(SECRET).headers(msg_id, body, time.time())
    assert Webhook(SECRET).verify(body, headers) == orjson.loads(body)


@pytest.mark.parametrize(
    "secret",
    [
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",  # no prefix
        "whsec_",  # empty
        "whsec_not a secret!",  # the package would drop the spaces and "!" and go on
        "whsec_" + base64.urlsafe_b64encode(b"\xfb" * 24).decode(),  # "-" and "_"
        "whsec_" + base64.b64encode(b"short").decode(),
        "whsec_ÄÖÜ" + SPEC_SECRET[6:],
    ],
)
def test_a_bad_secret_is_a_config_error_saying_how_to_make_one(secret: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Signer(secret)
    message = str(caught.value)
    assert "whsec_" in message and MAKE_SECRET in message and "\n" not in message
    if len(secret) > len("whsec_"):
        assert secret[len("whsec_") :] not in message  # a secret never lands in a log


def test_the_command_in_the_message_makes_a_good_secret() -> None:
    argv = shlex.split(MAKE_SECRET)
    assert argv[0] == "python"
    made = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, check=True)
    Signer(made.stdout.strip())
    assert new_secret() != new_secret()
    Signer(new_secret())
    Signer(SPEC_SECRET.rstrip("="))  # padding is optional, as in the reference libraries


def test_a_webhook_id_with_a_dot_or_line_break_is_refused() -> None:
    signer = Signer(SECRET)
    for bad in ("", "msg.1", "msg\r\nx: y", "msg 1"):
        with pytest.raises(ValueError):
            signer.headers(bad, b"{}", time.time())


# -- ids and bodies ------------------------------------------------------------------------


def test_event_ids_are_stable_and_distinct() -> None:
    # Pinned: a dispatcher of another version must send the same id for the same event.
    assert event_id("shop", "r1", 3, "record.updated") == "msg_gfhkjce2lapl72s2lfhiiihngl"
    ids = {
        event_id("shop", "r1", 3, "record.updated"),
        event_id("shop", "r1", 4, "record.updated"),
        event_id("shop", "r1", 3, "record.gone"),
        event_id("shop2", "r1", 3, "record.updated"),
        event_id("sho", "pr1", 3, "record.updated"),  # no ambiguity in how parts join
    }
    assert len(ids) == 5
    assert all(len(i) == 30 and i.replace("_", "").isalnum() for i in ids)


def test_the_body_is_the_same_bytes_on_every_retry() -> None:
    fields: dict[str, Any] = {
        "kind": "record.gone",
        "crawl": "shop",
        "record_id": "r1",
        "version": 2,
        "url": "https://shop.test/p/1",
        "data": {"title": "Tea", "price": 3, "a": [1]},
        "written_at": 1_700_000_000.25,
        "gone_at": 1_700_000_000,
    }
    body = event_body(**fields)
    assert body == event_body(**fields)
    assert body == (
        b'{"data":{"crawl":"shop","data":{"a":[1],"price":3,"title":"Tea"},'
        b'"gone_at":"2023-11-14T22:13:20.000000Z","id":"r1","url":"https://shop.test/p/1",'
        b'"version":2},"timestamp":"2023-11-14T22:13:20.250000Z","type":"record.gone"}'
    )
    with pytest.raises(ValueError):
        event_body(**{**fields, "kind": "record.deleted"})


# -- retries -------------------------------------------------------------------------------


def test_the_schedule_jitters_within_bounds_and_then_gives_up() -> None:
    schedule = RetrySchedule(rng=random.Random(7))
    assert schedule.delays == SPEC_DELAYS and schedule.attempts == len(SPEC_DELAYS) + 1
    for attempt, base in enumerate(SPEC_DELAYS, start=1):
        for _ in range(20):
            wait = schedule.delay(attempt)
            assert wait is not None and 0.8 * base <= wait <= 1.2 * base
    assert schedule.delay(len(SPEC_DELAYS) + 1) is None
    assert schedule.delay(len(SPEC_DELAYS) + 1, retry_after=5) is None
    same = [RetrySchedule(rng=random.Random(1)).delay(3) for _ in range(2)]
    assert same[0] == same[1]


def test_retry_after_lengthens_a_wait_but_never_shortens_it() -> None:
    schedule = RetrySchedule((10,), rng=random.Random(1))
    assert schedule.delay(1, retry_after=100) == 100
    wait = schedule.delay(1, retry_after=0.5)
    assert wait is not None and 8 <= wait <= 12


@pytest.mark.parametrize(
    ("text", "delays"),
    [("0.1,0.5,2", (0.1, 0.5, 2.0)), (" 5s, 5m ,2h,0", (5.0, 300.0, 7200.0, 0.0)), (".5", (0.5,))],
)
def test_a_schedule_from_the_command_line(text: str, delays: tuple[float, ...]) -> None:
    assert RetrySchedule.parse(text).delays == delays


@pytest.mark.parametrize("text", ["", "1,,2", "5x", "-1", "nan", "inf", "1e3", "5 minutes"])
def test_a_bad_schedule_says_what_to_write(text: str) -> None:
    with pytest.raises(ConfigError, match="5s,5m,30m,2h"):
        RetrySchedule.parse(text)


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        ("99999999999999999999", MAX_RETRY_AFTER),
        ("Tue, 14 Nov 2023 22:14:50 GMT", 90.0),  # NOW + 90 s
        ("Tuesday, 14-Nov-23 22:14:50 GMT", 90.0),  # RFC 850, obsolete but to be accepted
        ("Tue Nov 14 22:14:50 2023", 90.0),  # asctime: no zone, and GMT all the same
        ("Tue, 14 Nov 2023 20:00:00 GMT", 0.0),  # in the past: now
        ("Fri, 14 Nov 2025 22:13:20 GMT", MAX_RETRY_AFTER),
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("1.5", None),
        ("Tue, 99 Nov 2023 22:14:50 GMT", None),
    ],
)
def test_retry_after_in_both_forms(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, NOW) == seconds


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, "delivered"),
        (204, "delivered"),
        (299, "delivered"),
        (410, "disable"),
        (None, "retry"),
        (301, "retry"),
        (400, "retry"),
        (404, "retry"),
        (429, "retry"),
        (500, "retry"),
        (503, "retry"),
    ],
)
def test_classify(status: int | None, outcome: str) -> None:
    assert classify(status) == outcome


# -- the receiver --------------------------------------------------------------------------


def test_processed_once_then_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "seen" / "hooks.db"
    msg_id, body = body_of(1)
    headers = Signer(SECRET).headers(msg_id, body, time.time())
    with with_log(path) as receiver:
        # Header names as http.server hands them over.
        titled = {name.title(): value for name, value in headers.items()}
        assert receiver.handle(body, titled, log_record) == "processed"
        retry = Signer(SECRET).headers(msg_id, body, time.time() + 1)  # a fresh signature
        assert receiver.handle(body, retry, log_record) == "duplicate"
    assert rows(path, "SELECT record FROM log") == ["r1"]
    assert path.stat().st_mode & 0o777 == 0o600


def test_secret_rotation_any_listed_signature_passes(tmp_path: Path) -> None:
    msg_id, body = body_of(1)
    headers = Signer(SECRET).headers(msg_id, body, time.time())
    old = Signer(new_secret()).headers(msg_id, body, time.time())["webhook-signature"]
    headers["webhook-signature"] = f"v1a,AAAA {old} {headers['webhook-signature']}"
    with with_log(tmp_path / "hooks.db") as receiver:
        assert receiver.handle(body, headers, log_record) == "processed"


def forged(field: str, value: str) -> tuple[bytes, dict[str, str]]:
    msg_id, body = body_of(1)
    headers = Signer(SECRET).headers(msg_id, body, time.time())
    if field == "body":
        return body.replace(b'"price":1', b'"price":0'), headers
    headers[field] = value
    return body, headers


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        forged("body", ""),
        forged("webhook-signature", "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4="),
        forged("webhook-signature", "v1"),  # no comma: the package raises ValueError
        forged("webhook-signature", "v1,a,b"),
        forged("webhook-signature", "v1,@@@"),  # not base64: binascii.Error
        forged("webhook-signature", ""),
        forged("webhook-id", "msg_other"),
        forged("webhook-timestamp", str(int(time.time()) - 600)),  # a replay
        forged("webhook-timestamp", "soon"),
        (b"\xff{}", Signer(SECRET).headers("msg_1", b"{}", time.time())),
        (b"[1]", Signer(SECRET).headers("msg_1", b"[1]", time.time())),
        (b"{nope", Signer(SECRET).headers("msg_1", b"{nope", time.time())),
    ],
)
def test_forged_or_malformed_webhooks_are_rejected(
    tmp_path: Path, body: bytes, headers: dict[str, str]
) -> None:
    with with_log(tmp_path / "hooks.db") as receiver, pytest.raises(WebhookRejected):
        receiver.handle(body, headers, log_record)
    assert rows(tmp_path / "hooks.db", "SELECT id FROM webhook_seen") == []


def test_an_old_signature_is_rejected_by_the_receiver_too(tmp_path: Path) -> None:
    msg_id, body = body_of(1)
    with with_log(tmp_path / "hooks.db") as receiver, pytest.raises(WebhookRejected, match="old"):
        receiver.handle(body, Signer(SECRET).headers(msg_id, body, time.time() - 301), log_record)


def test_a_failing_process_records_nothing_and_the_retry_processes(tmp_path: Path) -> None:
    path = tmp_path / "hooks.db"
    msg_id, body = body_of(1)

    def half_then_fail(payload: dict[str, Any], conn: sqlite3.Connection) -> None:
        log_record(payload, conn)
        raise RuntimeError("the user's bug")

    with with_log(path) as receiver:
        with pytest.raises(RuntimeError, match="the user's bug"):
            receiver.handle(body, Signer(SECRET).headers(msg_id, body, time.time()), half_then_fail)
        assert rows(path, "SELECT record FROM log") == []
        assert rows(path, "SELECT id FROM webhook_seen") == []
        headers = Signer(SECRET).headers(msg_id, body, time.time())
        assert receiver.handle(body, headers, log_record) == "processed"
    assert rows(path, "SELECT record FROM log") == ["r1"]


def test_a_process_that_commits_itself_is_told_not_to(tmp_path: Path) -> None:
    msg_id, body = body_of(1)

    def commits(payload: dict[str, Any], conn: sqlite3.Connection) -> None:
        conn.execute("COMMIT")

    with with_log(tmp_path / "hooks.db") as receiver, pytest.raises(ConfigError, match="commit"):
        receiver.handle(body, Signer(SECRET).headers(msg_id, body, time.time()), commits)


def test_threads_handling_the_same_events_process_each_once(tmp_path: Path) -> None:
    path = tmp_path / "hooks.db"
    events = [body_of(i) for i in range(40)]
    signer = Signer(SECRET)
    outcomes: list[str] = []
    with with_log(path) as receiver:

        def deliver(order: int) -> None:
            for msg_id, body in random.Random(order).sample(events, len(events)):
                headers = signer.headers(msg_id, body, time.time())
                outcomes.append(receiver.handle(body, headers, log_record))

        threads = [threading.Thread(target=deliver, args=(n,)) for n in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert outcomes.count("processed") == 40 and outcomes.count("duplicate") == 200
    assert sorted(rows(path, "SELECT record FROM log")) == sorted(f"r{i}" for i in range(40))


CHILD = """
import sys, time
from pathlib import Path
from crashsafe.effects.receiver import Receiver
from crashsafe.effects.webhooks import Signer
from tests.unit.test_webhooks import body_of, log_record

secret, path, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
signer = Signer(secret)


def slow_process(payload, conn):
    # Writes that take a while before the effect, so that many kills land inside process().
    conn.executemany("INSERT INTO scratch (n) VALUES (?)", ((n,) for n in range(1000)))
    log_record(payload, conn)


with Receiver(secret, path) as receiver:
    for i in range(count):
        msg_id, body = body_of(i)
        receiver.handle(body, signer.headers(msg_id, body, time.time()), slow_process)
"""


def assert_each_seen_id_has_its_effect_once(path: Path, ids: dict[str, str]) -> set[str]:
    logged = rows(path, "SELECT record FROM log")
    seen = {ids[msg_id] for msg_id in rows(path, "SELECT id FROM webhook_seen")}
    assert len(logged) == len(set(logged)), "an event was processed twice"
    assert set(logged) == seen, "an id was recorded without its effect, or the reverse"
    return seen


def ended_or_seen(child: subprocess.Popen[str], path: Path, target: int) -> bool:
    """Whether ``child`` has ended or ``target`` ids are recorded as seen."""
    return child.poll() is not None or rows(path, "SELECT count(*) FROM webhook_seen")[0] >= target


@pytest.mark.slow
def test_a_receiver_killed_mid_stream_never_processes_twice_nor_loses_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "hooks.db"
    count = 3000
    ids = {event_id("shop", f"r{i}", 1, "record.created"): f"r{i}" for i in range(count)}
    with_log(path).close()
    root = Path(__file__).resolve().parents[2]
    # Each kill comes once the child has processed that many more events, as seen by
    # polling the database: at an arbitrary point of whatever the child is doing then.
    for more in (1, 3, 10, 40, 150):
        seen = assert_each_seen_id_has_its_effect_once(path, ids)
        if len(seen) == count:
            break
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, SECRET, str(path), str(count)],
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        with reaped(child):
            wait_for(functools.partial(ended_or_seen, child, path, len(seen) + more))
            child.kill()  # SIGKILL, by this child's own PID; nothing if it has ended
            _, err = child.communicate(timeout=30)
            assert child.returncode in (0, -signal.SIGKILL), err
        assert_each_seen_id_has_its_effect_once(path, ids)
    # Whatever the kills left undone, the sender's retries now complete exactly once.
    before = assert_each_seen_id_has_its_effect_once(path, ids)
    signer = Signer(SECRET)
    processed = 0
    with Receiver(SECRET, path) as receiver:
        for i in range(count):
            msg_id, body = body_of(i)
            headers = signer.headers(msg_id, body, time.time())
            processed += receiver.handle(body, headers, log_record) == "processed"
    assert processed == count - len(before)
    assert sorted(rows(path, "SELECT record FROM log")) == sorted(ids.values())
