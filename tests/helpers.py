"""Helpers for tests that run the real CLI in subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

P = TypeVar("P", bound="subprocess.Popen[Any]")

CLI = [sys.executable, "-m", "crashsafe"]


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env=cli_env()
    )


def exported(db_url: str, *args: str) -> list[dict[str, Any]]:
    """``crashsafe export --with-meta`` (and ``args``), each line as ``{"key", "id",
    "version", "gone_at" (in a change feed, for gone ones), "data": the item's fields}``."""
    out = run_cli("export", "--db", db_url, "--with-meta", *args)
    assert out.returncode == 0, out.stderr
    records = []
    for line in out.stdout.splitlines():
        row = json.loads(line)
        meta = {k.removeprefix("_crashsafe_"): row.pop(k) for k in list(row)
                if k.startswith("_crashsafe_")}  # fmt: skip
        if meta.get("gone_at") is None:
            meta.pop("gone_at", None)
        records.append({**meta, "data": row})
    return records


def start_cli(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli_env(),
    )


@contextlib.contextmanager
def reaped(proc: P) -> Iterator[P]:
    """``proc`` for the block; on the way out, if it still runs (the test failed half-way),
    it is killed by its PID and waited for, so no failing test leaves a child behind."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.wait(timeout=30)
        finally:
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("CRASHSAFE_DB", None)
    return env


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.load(resp)


def wait_for(predicate: Callable[[], bool], timeout: float = 30, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(every)


def wait_for_line(stream: IO[str], text: str, timeout: float = 30) -> str:
    """Read a child's pipe until ``text`` has appeared; return what was read. Fails after
    ``timeout`` seconds instead of blocking. Reads the descriptor itself: a buffered
    readline would keep what arrived in one chunk out of select's sight."""
    import select

    seen = b""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise TimeoutError(f"{text!r} not seen in time; got {seen!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise EOFError(f"{text!r} not seen before the end; got {seen!r}")
        seen += chunk
    return seen.decode(errors="replace")
