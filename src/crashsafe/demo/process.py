"""The demo shop in a process of its own, for the kill test and the benchmarks: its
request counts are the server's, and it does not share the crawler's CPU time or GIL."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any
from urllib.parse import quote

from crashsafe.demo.shop import ShopOptions
from crashsafe.errors import CrashsafeError


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(url: str, *, method: str = "GET") -> Any:
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


class ShopProcess:
    """``crashsafe demo-site`` as a subprocess on a free port. Use as a context manager."""

    def __init__(self, options: ShopOptions) -> None:
        self.options = options
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        o = options
        self.args = [
            sys.executable, "-m", "crashsafe", "demo-site", "--port", str(self.port),
            "--listings", str(o.listings), "--per-listing", str(o.per_listing),
            "--latency-ms", str(o.latency_ms), "--error-rate", str(o.error_rate),
            "--error-attempts", str(o.error_attempts), "--seed", str(o.seed),
        ]  # fmt: skip
        self.args += ["--tracking"] * o.tracking + ["--dup-links"] * o.dup_links
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ShopProcess:
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.stats()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                    raise CrashsafeError(f"the demo shop did not start: {err.strip()}") from None
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise CrashsafeError("the demo shop did not answer within 30 s") from None
                time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def stats(self) -> Any:
        return _request(f"{self.url}/stats")

    def reset(self) -> Any:
        return _request(f"{self.url}/reset", method="POST")

    def catalogue(self) -> dict[str, dict[str, str]]:
        result: dict[str, dict[str, str]] = _request(f"{self.url}/catalogue")
        return result

    def log(self, since: float = 0.0, *, agent: str | None = None) -> list[tuple[float, str]]:
        """Page requests since ``since`` (only from User-Agent ``agent`` if given)."""
        query = f"since={since}" + (f"&agent={quote(agent)}" if agent else "")
        return [(t, p) for t, p, _ in _request(f"{self.url}/log?{query}")]
