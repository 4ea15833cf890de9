"""A receiver of crashsafe's webhooks: verify each one, process each webhook id once.

``crashsafe deliver`` sends every event at least once with a stable ``webhook-id``;
:class:`Receiver` turns that into exactly-once processing by recording the ids it has
processed in the same SQLite transaction as the processing's own writes.
``examples/webhook_receiver.py`` is a whole receiver built on it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from standardwebhooks.webhooks import WebhookVerificationError

from crashsafe.effects.webhooks import webhook_for
from crashsafe.errors import ConfigError, CrashsafeError, StoreError
from crashsafe.files import create_private, private_folder

__all__ = ["Receiver", "WebhookRejected"]


class WebhookRejected(CrashsafeError):
    """The webhook's signature, timestamp or headers do not check out: answer 401, and
    check that sender and receiver share the secret and that their clocks agree."""


_SEEN_SCHEMA = """
CREATE TABLE IF NOT EXISTS webhook_seen (
    id TEXT PRIMARY KEY,
    received_at REAL NOT NULL
) WITHOUT ROWID
"""


def _open_seen(path: Path) -> sqlite3.Connection:
    private_folder(path.parent)
    create_private(path)  # before SQLite opens it, so it (and its -wal, -shm) are 0600
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL: once we answer 2xx the sender never retries, so the commit must survive a
        # power cut too, not only a kill.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute(_SEEN_SCHEMA)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(
            f"cannot use {path} for the webhooks seen ({exc}): give a new file or one a "
            "Receiver created"
        ) from None
    return conn


class Receiver:
    """Verifies webhooks and processes each webhook id exactly once.

    The id goes into the ``webhook_seen`` table of ``seen_path`` and the effects of
    ``process`` are written through the same connection, in one transaction: a kill
    between them commits neither, and the sender's retry processes the event then. Ids are
    kept for good: a sender retries an id for days (each time with a fresh timestamp), so
    forgetting it after the 5-minute replay window would let a retry run ``process`` again.

    Safe from many threads (one connection behind a lock: SQLite writes one transaction
    at a time anyway) and from many processes on the same file.

    Args:
        secret: the endpoint's ``whsec_`` secret, as the sender has it.
        seen_path: the SQLite file (created ``0600``, WAL); your own tables can live in it.

    Raises:
        ConfigError: the secret is not ``whsec_`` + base64 of 24 or more bytes.
        StoreError: ``seen_path`` is not a database this class can use.
    """

    def __init__(self, secret: str, seen_path: Path) -> None:
        self._webhook = webhook_for(secret)
        self._path = seen_path
        self._conn = _open_seen(seen_path)
        self._lock = threading.Lock()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            self._conn.close()

    def handle(
        self,
        body: bytes,
        headers: Mapping[str, str],
        process: Callable[[dict[str, Any], sqlite3.Connection], None],
    ) -> Literal["processed", "duplicate"]:
        """Verify one webhook and run ``process(payload, connection)`` unless its id was seen.

        ``process`` writes its effects through ``connection`` and neither commits nor rolls
        back: that is done here, together with the record of the id. If it raises, nothing
        is recorded and the exception propagates (answer 5xx: the sender retries).

        Args:
            body: the request body, byte for byte as received.
            headers: the request headers (names in any case).
            process: the effects of one event, given the parsed JSON body.

        Returns:
            ``"processed"``, or ``"duplicate"`` (processed before): answer 2xx to both.

        Raises:
            WebhookRejected: bad or missing signature, timestamp more than 5 minutes away
                (the package's tolerance, on the wall clock), or a body that is not a JSON
                object.
            ConfigError: ``process`` committed or rolled back the transaction itself.
        """
        msg_id, payload = self._verify(body, headers)
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(
                    f"{self._path} stayed locked ({exc}): another process holds a long "
                    "transaction on it"
                ) from None
            try:
                new = conn.execute(
                    "INSERT OR IGNORE INTO webhook_seen (id, received_at) VALUES (?, ?)",
                    (msg_id, time.time()),
                ).rowcount
                if not new:
                    conn.execute("ROLLBACK")
                    return "duplicate"
                process(payload, conn)
                if not conn.in_transaction:
                    raise ConfigError(
                        "the webhook's process() committed or rolled back the transaction "
                        "itself: leave that to Receiver.handle, which commits the effects and "
                        "the seen id together"
                    )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        return "processed"

    def _verify(self, body: bytes, headers: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
        lowered = {name.lower(): value for name, value in headers.items()}
        try:
            self._webhook.verify(body, lowered, json_parse=False)
        except WebhookVerificationError as exc:
            raise WebhookRejected(
                f"webhook rejected: {exc} (check that the secret is the sender's and that "
                "both clocks are right to within 5 minutes)"
            ) from None
        except ValueError:  # a signature without "v1,", bad base64, a body not UTF-8
            raise WebhookRejected(
                "webhook rejected: malformed webhook-signature header or a body that is not "
                "UTF-8; the sender must follow the Standard Webhooks format"
            ) from None
        try:  # (not orjson: it reads an integer beyond 64 bits as a float, 1e30)
            payload = json.loads(body)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            raise WebhookRejected("webhook rejected: the signed body is not a JSON object")
        return lowered["webhook-id"], payload
