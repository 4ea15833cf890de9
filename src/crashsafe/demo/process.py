"""Servers in processes of their own (the demo shop, the LLM test server), for the kill
test and the benchmarks: their counts are the server's, and they do not share the
measured process's CPU time or GIL."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any, Self
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


class ServiceProcess:
    """A crashsafe server command as a subprocess on a free port; a context manager.

    Subclasses give the arguments; ``/stats`` must answer once the server is up.
    """

    name = "server"

    def __init__(self, args: list[str], *, port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [sys.executable, "-m", "crashsafe", *args, "--port", str(self.port)]
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.stats()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                    raise CrashsafeError(f"the {self.name} did not start: {err.strip()}") from None
                if time.monotonic() > deadline:
                    self.__exit__()
                    raise CrashsafeError(f"the {self.name} did not answer within 30 s") from None
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


class ShopProcess(ServiceProcess):
    """``crashsafe demo-site`` in its own process."""

    name = "demo shop"

    def __init__(self, options: ShopOptions, *, port: int | None = None) -> None:
        o = options
        args = [
            "demo-site", "--listings", str(o.listings), "--per-listing", str(o.per_listing),
            "--latency-ms", str(o.latency_ms), "--error-rate", str(o.error_rate),
            "--error-attempts", str(o.error_attempts), "--seed", str(o.seed),
            "--pager", str(o.pager), "--round", str(o.round), "--page-kb", str(o.page_kb),
        ]  # fmt: skip
        args += ["--tracking"] * o.tracking + ["--dup-links"] * o.dup_links
        args += ["--js-share", str(o.js)] * bool(o.js)
        super().__init__(args, port=port)
        self.options = options

    def catalogue(self) -> dict[str, dict[str, str]]:
        result: dict[str, dict[str, str]] = _request(f"{self.url}/catalogue")
        return result

    def log(self, since: float = 0.0, *, agent: str | None = None) -> list[tuple[float, str]]:
        """Page requests since ``since`` (only from User-Agent ``agent`` if given)."""
        query = f"since={since}" + (f"&agent={quote(agent)}" if agent else "")
        return [(t, p) for t, p, _ in _request(f"{self.url}/log?{query}")]
