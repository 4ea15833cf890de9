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


def log_options(f: F) -> F:
    """``--log-level``/``-L``/``--loglevel`` (Scrapy's spellings) and ``--log-format``:
    Python logging to stderr, configured before the command runs (crashsafe/logs.py)."""

    def configure(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        from crashsafe.logs import configure as configure_logging

        ctx.meta[f"log_{param.name}"] = value
        level = ctx.meta.get("log_level", "INFO")
        fmt = ctx.meta.get("log_format", "text")
        configure_logging(level, fmt)
        return value

    f = click.option(
        "-L",
        "--log-level",
        "--loglevel",
        "level",
        type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
        default="INFO",
        show_default=True,
        expose_value=False,
        callback=configure,
        help="Log lines at this level and above (DEBUG: one line per request).",
    )(f)
    return click.option(
        "--log-format",
        "format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        expose_value=False,
        callback=configure,
        help="json: one JSON object per line (time, level, logger, message, fields).",
    )(f)


def say(line: str) -> None:
    """A line of a command's own report, on stderr: as it is, or as a JSON log line
    (logger ``crashsafe``) under ``--log-format json``."""
    from crashsafe.logs import json_lines

    if json_lines():
        import logging

        logging.getLogger("crashsafe").info(line)
    else:
        click.echo(line, err=True)


def open_db(url: str, *, create: bool = False, readonly: bool = False) -> Store:
    """Open the store; commands other than ``crawl`` refuse a database that is not there,
    and commands that only read open it ``readonly`` (they never write nor migrate)."""
    from crashsafe.store import open_store

    return open_store(url, create=create, readonly=readonly)


def clock_time(ts: float) -> str:
    """``06:31 UTC``: a time of today as people read it in a line (the date when not
    today)."""
    from datetime import UTC, datetime

    when = datetime.fromtimestamp(ts, UTC)
    today = datetime.now(UTC).date()
    return when.strftime("%H:%M:%S UTC" if when.date() == today else "%Y-%m-%d %H:%M UTC")


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def serve_until_interrupted(
    app: web.Application,
    port: int,
    *,
    announce: Callable[[int], str],
    name: str,
    host: str = "127.0.0.1",
) -> None:
    """Serve ``app`` on ``host``:``port`` until Ctrl-C; ``announce(bound_port)`` is printed
    (and may act on the port bound: the console's guard learns it there)."""
    import asyncio

    from crashsafe.demo.server import serve

    async def main() -> None:
        try:
            runner, bound = await serve(app, host=host, port=port)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        click.echo(announce(bound), err=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        click.echo(f"{name} stopped.", err=True)


def group_errors(rows: list[FailedUrl]) -> list[tuple[int, str, str]]:
    """``(count, error, an example URL)`` per error pattern (:mod:`crashsafe.failures`),
    most frequent first."""
    from crashsafe.failures import group_failures

    return [(len(g.failures), g.label, g.failures[0].url) for g in group_failures(rows)]


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
