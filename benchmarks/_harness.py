"""Run contenders as subprocesses against one demo shop and measure them the same way.

Wall time, CPU seconds (user + system, from wait4) and peak RSS of each child.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Measurement:
    wall: float
    cpu: float
    peak_rss_mb: float
    returncode: int


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.load(resp)


class ShopProcess:
    """``crashsafe demo-site`` in its own process (so it does not share our GIL)."""

    def __init__(self, *, listings: int, per_listing: int, latency_ms: float = 0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [
            sys.executable, "-m", "crashsafe", "demo-site", "--port", str(self.port),
            "--listings", str(listings), "--per-listing", str(per_listing),
            "--latency-ms", str(latency_ms),
        ]  # fmt: skip
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ShopProcess:
        self.proc = subprocess.Popen(self.args, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                get_json(f"{self.url}/stats")
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stats(self) -> Any:
        return get_json(f"{self.url}/stats")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


def measure(args: Sequence[str], *, env: dict[str, str] | None = None) -> Measurement:
    """Run ``args`` to the end; CPU and peak RSS come from the kernel's accounting."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or dict(os.environ)
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        sys.stderr.write(err.decode(errors="replace"))
    return Measurement(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, code)


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
