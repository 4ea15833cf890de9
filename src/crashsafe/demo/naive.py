"""The naive scraper: the anti-pattern crashsafe exists to replace.

It restarts from the first listing page every time, inserts every product it sees as a
new row with an auto-increment id, and commits as it goes. Kill it and restart it, and
it stores duplicates and fetches everything again. Used by the kill test and as the
plain sequential baseline in benchmarks.

    python -m crashsafe.demo.naive http://127.0.0.1:8000/list/0 naive.db [USER-AGENT]
"""

from __future__ import annotations

import http.client
import re
import sqlite3
import sys
from urllib.parse import urljoin, urlsplit

PRODUCT = re.compile(r'<a class="product" href="([^"]+)"')
NEXT = re.compile(r'<a class="next" href="([^"]+)"')
FIELD = re.compile(r'class="(sku|name|price)">([^<]*)<')


class Client:
    """One keep-alive HTTP connection to the shop."""

    def __init__(self, base: str, agent: str) -> None:
        parts = urlsplit(base)
        self.conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        self.headers = {"User-Agent": agent}

    def get(self, url: str) -> tuple[int, str]:
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.conn.request("GET", path, headers=self.headers)
        resp = self.conn.getresponse()
        return resp.status, resp.read().decode("utf-8", "replace")


def scrape(start: str, db_path: str, agent: str = "naive-scraper") -> int:
    db = sqlite3.connect(db_path)
    db.execute(
        "CREATE TABLE IF NOT EXISTS products "
        "(id INTEGER PRIMARY KEY AUTOINCREMENT, sku TEXT, name TEXT, price TEXT)"
    )
    client = Client(start, agent)
    url: str | None = start
    stored = 0
    while url:
        status, html = client.get(url)
        if status != 200:
            continue  # naive: try the same listing again
        for href in PRODUCT.findall(html):
            product_url = urljoin(url, href)
            while True:
                p_status, page = client.get(product_url)
                if p_status == 200:
                    break
            fields = dict(FIELD.findall(page))
            db.execute(
                "INSERT INTO products (sku, name, price) VALUES (?, ?, ?)",
                (fields.get("sku"), fields.get("name"), fields.get("price")),
            )
            db.commit()
            stored += 1
        nxt = NEXT.search(html)
        url = urljoin(url, nxt.group(1)) if nxt else None
    db.close()
    return stored


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        sys.exit("usage: python -m crashsafe.demo.naive START_URL DB_PATH [USER-AGENT]")
    print(f"naive: stored {scrape(*args)} rows", file=sys.stderr)


if __name__ == "__main__":
    main()
