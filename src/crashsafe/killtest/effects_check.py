"""``killtest --effects``: after crashsafe's killed and resumed crawl (which downloaded
every product's picture and wrote a WARC archive), check the files and the archive, then
deliver the outbox to a real local receiver while SIGKILLing the dispatcher, and check
that the receiver processed each (record, version) exactly once."""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from crashsafe.demo.shop import IMAGES, ShopOptions, image, sku
from crashsafe.effects.receiver import Receiver, WebhookRejected
from crashsafe.effects.warc import read_archive
from crashsafe.effects.webhooks import new_secret
from crashsafe.store import open_store

DELIVER_TIMEOUT = 300.0


@dataclass(slots=True)
class EffectsOutcome:
    """What crashsafe's side effects came to in one run."""

    files: int = 0  # files under files/ab/cd/
    files_expected: int = IMAGES
    files_misnamed: int = 0  # named otherwise than the SHA-256 of their bytes
    temporaries: int = 0  # left in files/.tmp
    records_without_file: int = 0  # a record whose photo is not its picture's file
    warc_files: int = 0
    warc_responses: int = 0
    warc_unreadable: list[str] = field(default_factory=list)
    warc_missing: int = 0  # pages and pictures of the shop with no response archived
    events: int = 0  # outbox events, one per (record, version)
    records: int = 0  # (record, version) pairs the store holds
    processed: int = 0  # by the receiver
    processed_twice: int = 0
    processed_unknown: int = 0  # pairs processed but not in the store, or the reverse
    webhooks: int = 0  # requests the receiver answered (repeats included)
    dispatcher_kills: int = 0
    kills_planned: int = 0
    deliver_exit: int = 0

    def problems(self) -> list[str]:
        found = []
        if self.files != self.files_expected or self.files_misnamed:
            found.append(
                f"{self.files} files for {self.files_expected} distinct contents "
                f"({self.files_misnamed} misnamed)"
            )
        if self.temporaries:
            found.append(f"{self.temporaries} temporary files left")
        if self.records_without_file:
            found.append(f"{self.records_without_file} records without their picture")
        if self.warc_unreadable:
            found.append(f"WARC unreadable: {', '.join(self.warc_unreadable)}")
        if self.warc_missing or not self.warc_files:
            found.append(f"{self.warc_missing} pages or pictures not in the WARC archive")
        if (self.processed != self.events or self.events != self.records or
                self.processed_twice or self.processed_unknown):  # fmt: skip
            found.append(
                f"receiver processed {self.processed} of {self.events} events for "
                f"{self.records} record versions ({self.processed_twice} twice, "
                f"{self.processed_unknown} differing from the store's)"
            )
        if self.kills_planned and not self.dispatcher_kills:
            found.append("no dispatcher kill landed: exactly-once delivery not tested")
        if self.deliver_exit:
            found.append(f"the last deliver exited {self.deliver_exit}")
        return found


def check_effects(
    workdir: Path, db_url: str, shop_url: str, shop: ShopOptions, *, kills: int, seed: int
) -> EffectsOutcome:
    out = EffectsOutcome(kills_planned=kills)
    _check_files(workdir / "files", db_url, out)
    _check_warc(workdir / "warc", _shop_urls(shop_url, shop), out)
    with _receiver(workdir / "received.db") as (url, secret, counts):
        _deliver_with_kills(db_url, url, secret, counts, kills, random.Random(seed), out)
        with contextlib.closing(open_store(db_url, readonly=True)) as store:
            [crawl] = store.crawls()
            out.events = store.effect_stats(crawl).events
            versions = {(r.id, r.version) for r in store.iter_records(crawl)}
        processed = _processed(workdir / "received.db")
        out.records = len(versions)
        out.processed = len(processed)
        out.processed_twice = sum(1 for n in processed.values() if n > 1)
        out.processed_unknown = len(set(processed) ^ versions)
        out.webhooks = counts["webhooks"]
    return out


def _shop_urls(shop_url: str, shop: ShopOptions) -> set[str]:
    """Every listing, product page and picture of the shop: each must be archived."""
    return (
        {f"{shop_url}/list/{n}" for n in range(shop.listings)}
        | {f"{shop_url}/product/{sku(n)}" for n in range(shop.products)}
        | {f"{shop_url}/image/{n}.png" for n in range(shop.products)}
    )


def _check_files(folder: Path, db_url: str, out: EffectsOutcome) -> None:
    stored = [p for p in folder.glob("??/??/*") if p.is_file()]
    out.files = len(stored)
    out.files_misnamed = sum(
        1 for p in stored if hashlib.sha256(p.read_bytes()).hexdigest() != p.name
    )
    out.temporaries = sum(1 for _ in (folder / ".tmp").glob("*"))
    with contextlib.closing(open_store(db_url, readonly=True)) as store:
        for r in store.iter_records():
            want = hashlib.sha256(image(int(r.key.removeprefix("SKU-")))).hexdigest()
            photo = r.data.get("photo") or {}
            if photo.get("sha256") != want or not (folder / str(photo.get("path"))).is_file():
                out.records_without_file += 1


def _check_warc(folder: Path, expected: set[str], out: EffectsOutcome) -> None:
    from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]

    archived: set[str] = set()
    for path in sorted(folder.glob("*.warc.gz")):
        out.warc_files += 1
        try:  # warcio's own reader, on the file as it is: it must read it whole
            with path.open("rb") as stream:
                records = [
                    (r.rec_type, r.rec_headers.get_header("WARC-Target-URI"))
                    for r in ArchiveIterator(stream)
                ]
        except Exception as exc:
            out.warc_unreadable.append(f"{path.name}: {type(exc).__name__}")
            continue
        if len(records) != sum(1 for _ in read_archive(path)):
            out.warc_unreadable.append(f"{path.name}: a torn last record")
        responses = [uri for kind, uri in records if kind == "response"]
        out.warc_responses += len(responses)
        archived.update(responses)
    out.warc_missing = len(expected - archived)


@contextlib.contextmanager
def _receiver(path: Path) -> Iterator[tuple[str, str, Counter[str]]]:
    """A webhook receiver on 127.0.0.1 that records each event in the same transaction
    as its id (``Receiver``); ``changes`` holds one row per processing."""
    secret = new_secret()
    receiver = Receiver(secret, path)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE IF NOT EXISTS changes (record_id TEXT, version INTEGER)")
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def process(event: dict[str, Any], db: sqlite3.Connection) -> None:
        record = event["data"]
        db.execute("INSERT INTO changes VALUES (?, ?)", (record["id"], record["version"]))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                receiver.handle(body, dict(self.headers), process)
                status = 200
            except WebhookRejected:
                status = 401
            with lock:
                counts["webhooks"] += 1
                counts["processed"] = _count(path)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hooks", secret, counts
    finally:
        server.shutdown()
        server.server_close()
        receiver.close()


def _count(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM changes").fetchone()[0])


def _processed(path: Path) -> Counter[tuple[str, int]]:
    with sqlite3.connect(path) as db:
        return Counter(db.execute("SELECT record_id, version FROM changes"))


def _deliver_with_kills(
    db_url: str,
    url: str,
    secret: str,
    counts: Counter[str],
    kills: int,
    rng: random.Random,
    out: EffectsOutcome,
) -> None:
    """``crashsafe deliver`` SIGKILLed ``kills`` times, each after a random share of the
    events reached the receiver, then run to the end."""
    with contextlib.closing(open_store(db_url, readonly=True)) as store:
        [crawl] = store.crawls()
        events = store.effect_stats(crawl).events
    # One at a time, short leases and retries: the kills land mid-delivery, and a run
    # after one does not wait long for the deliveries its predecessor held.
    cmd = [sys.executable, "-m", "crashsafe", "deliver", "--db", db_url, "--webhook", url,
           "--concurrency", "1", "--timeout", "5", "--lease-seconds", "6",
           "--retry-schedule", "0.1,0.2,0.4,0.8,1.6"]  # fmt: skip
    env = {**os.environ, "CRASHSAFE_WEBHOOK_SECRET": secret}
    targets = sorted(rng.uniform(0.1, 0.9) * events for _ in range(kills))
    for target in targets:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # At its share, and never before it delivered something itself: a kill lands
        # mid-delivery, not while the process starts.
        due = max(target, counts["processed"] + 1)
        deadline = time.monotonic() + DELIVER_TIMEOUT
        while proc.poll() is None and counts["processed"] < due:
            if time.monotonic() > deadline:
                break
            time.sleep(0.005)
        if proc.poll() is None:
            proc.kill()
            out.dispatcher_kills += 1
        proc.wait()
    final = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=DELIVER_TIMEOUT, check=False
    )
    out.deliver_exit = final.returncode
