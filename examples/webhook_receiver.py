"""A webhook receiver for `crashsafe deliver`: each (record, version) processed once.

    CRASHSAFE_WEBHOOK_SECRET=whsec_... python examples/webhook_receiver.py --db received.db
    crashsafe deliver --db sqlite:///shop.db --webhook http://127.0.0.1:8100/hooks

The sender delivers at least once: a dispatcher killed after our 2xx and before it
stored the answer sends that event again, with the same webhook-id. Receiver verifies the
signature and records the id in the same SQLite transaction as what processing writes
(here a row in `changes`), so a repeat is answered 200 and not processed again.
GET /count says how many webhooks came and how many were processed.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from crashsafe.effects.receiver import Receiver, WebhookRejected


def process(event: dict[str, Any], db: sqlite3.Connection) -> None:
    """What this receiver does with an event: keep the record's new version."""
    record = event["data"]
    db.execute(
        "INSERT INTO changes (record_id, version, type, data) VALUES (?, ?, ?, ?)",
        (record["id"], record["version"], event["type"], json.dumps(record["data"])),
    )


def serve(secret: str, path: Path, port: int) -> None:
    receiver = Receiver(secret, path)
    with sqlite3.connect(path) as db:  # our own table, beside the webhook ids
        db.execute(
            "CREATE TABLE IF NOT EXISTS changes (record_id TEXT, version INTEGER, "
            "type TEXT, data TEXT)"
        )
    received = {"webhooks": 0, "duplicates": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                outcome = receiver.handle(body, dict(self.headers), process)
            except WebhookRejected as exc:
                self.answer(401, {"error": str(exc)})
                return
            with lock:
                received["webhooks"] += 1
                received["duplicates"] += outcome == "duplicate"
            self.answer(200, {"outcome": outcome})

        def do_GET(self) -> None:
            with sqlite3.connect(path) as db:
                processed = db.execute("SELECT count(*) FROM changes").fetchone()[0]
            with lock:
                self.answer(200, {**received, "processed": processed})

        def answer(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per webhook would drown the terminal

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"receiving on http://127.0.0.1:{server.server_port}/hooks", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        receiver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="received.db", type=Path, help="SQLite file")
    parser.add_argument("--port", default=8100, type=int, help="0: any free port")
    args = parser.parse_args()
    secret = os.environ.get("CRASHSAFE_WEBHOOK_SECRET")
    if not secret:
        parser.error("set CRASHSAFE_WEBHOOK_SECRET=whsec_... (the sender's secret)")
    serve(secret, args.db, args.port)


if __name__ == "__main__":
    main()
