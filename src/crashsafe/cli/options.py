"""Options shared by several commands."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from crashsafe.store import Store

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_DB = "sqlite:///crashsafe.db"


def db_option(default: str | None = None) -> Callable[[F], F]:
    return click.option(
        "--db",
        "db_url",
        default=default or os.environ.get("CRASHSAFE_DB", DEFAULT_DB),
        show_default=True,
        metavar="URL",
        help="Database: sqlite:///path.db (env CRASHSAFE_DB).",
    )


def open_db(url: str) -> Store:
    from crashsafe.store import open_store

    return open_store(url)


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
