"""A console (`crashsafe ui`) in a child process, for the console's tests."""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.helpers import reaped, start_cli, wait_for_line


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus' exposition format as ``{'name{labels}': value}``."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def total(values: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in values.items() if k.startswith(prefix))


@dataclass
class Console:
    url: str  # http://127.0.0.1:PORT

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def state(self) -> dict[str, Any]:
        status, body = self.get("/api/state")
        assert status == 200, body
        return json.loads(body)  # type: ignore[no-any-return]

    def crawl(self, name: str = "demo-shop") -> dict[str, Any]:
        [crawl] = [c for c in self.state()["crawls"] if c["name"] == name]
        return crawl  # type: ignore[no-any-return]

    def csrf(self) -> str:
        _, page = self.get("/")
        found = re.search(r'name="crashsafe-csrf" content="([^"]+)"', page)
        assert found, page
        return found[1]

    def post(
        self, path: str, body: Any = None, *, csrf: str | None = "page", **headers: str
    ) -> tuple[int, str]:
        sent = {"Content-Type": "application/json", **headers}
        if csrf is not None:
            sent["X-Crashsafe-CSRF"] = self.csrf() if csrf == "page" else csrf
        data = json.dumps(body or {}).encode()
        request = urllib.request.Request(self.url + path, data=data, headers=sent, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


@contextlib.contextmanager
def console(db_url: str, *args: str) -> Iterator[Console]:
    """`crashsafe ui --db db_url --port 0 args...` until the block ends."""
    with reaped(start_cli("ui", "--db", db_url, "--port", "0", *args)) as proc:
        said = wait_for_line(proc.stderr, "Ctrl-C stops it")
        found = re.search(r"http://127\.0\.0\.1:(\d+)/", said)
        assert found, said
        yield Console(f"http://127.0.0.1:{found[1]}")
        proc.terminate()
