"""Options shared by several commands."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from crashsafe.errors import ConfigError
from crashsafe.store import FailedUrl, Store

if TYPE_CHECKING:
    from aiohttp import web

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DB = "sqlite:///crashsafe.db"


def db_option() -> Callable[[F], F]:
    return click.option(
        "--db",
        "db_url",
        default=os.environ.get("CRASHSAFE_DB", DEFAULT_DB),
        show_default=f"{DEFAULT_DB}, or $CRASHSAFE_DB",  # (never its value: a password)
        metavar="URL",
        help="Database: sqlite:///path.db or postgresql://user@host/db (env CRASHSAFE_DB).",
    )


def open_db(url: str, *, create: bool = False, readonly: bool = False) -> Store:
    """Open the store; commands other than ``crawl`` refuse a database that is not there,
    and commands that only read open it ``readonly`` (they never write nor migrate)."""
    from crashsafe.store import open_store

    return open_store(url, create=create, readonly=readonly)


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def serve_until_interrupted(
    app: web.Application, port: int, *, announce: Callable[[int], str], name: str
) -> None:
    """Serve ``app`` on 127.0.0.1:``port`` until Ctrl-C; ``announce(bound_port)`` is printed."""
    import asyncio

    from crashsafe.demo.server import serve

    async def main() -> None:
        try:
            runner, bound = await serve(app, port=port)
        except OSError as exc:
            raise ConfigError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from exc
        click.echo(announce(bound), err=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        click.echo(f"{name} stopped.", err=True)


def short_error(error: str | None) -> str:
    """An error's last line (a traceback's is the exception), or ``-``."""
    lines = (error or "").strip().splitlines()
    return lines[-1] if lines else "-"


def group_errors(rows: list[FailedUrl]) -> list[tuple[int, str, str]]:
    """``(count, error, an example URL)`` per distinct short error, most frequent first."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        groups.setdefault(short_error(row.error), []).append(row.url)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))
    return [(len(urls), error, urls[0]) for error, urls in ranked]


def iso_time(ts: float) -> str:
    """Seconds since the epoch as ISO 8601 in UTC, to the millisecond."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def program() -> str:
    """How this command was started, to repeat in advice: ``.venv/bin/crashsafe`` when it
    was started so (``crashsafe`` alone may not be on the PATH)."""
    import sys

    started = sys.argv[0] if sys.argv else ""
    if started.endswith("__main__.py"):
        return f"{os.path.basename(sys.executable)} -m crashsafe"
    return started if os.sep in started else "crashsafe"
