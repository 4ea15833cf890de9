"""pause, resume, cancel, audit: steer a running crawl from anywhere that reaches its
database, and see who did (``store/sql_control.py`` has the rules)."""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import click

from crashsafe.cli.common import crawl_names, one_crawl
from crashsafe.cli.options import clock_time, db_option, open_db
from crashsafe.errors import ConfigError
from crashsafe.store import masked
from crashsafe.text import printable

F = TypeVar("F", bound=Callable[..., Any])
_HOST = re.compile(r"[\w.-]+|[0-9a-f:.]+", re.IGNORECASE)  # a name (IDN too) or an IPv6 address


def default_actor() -> str:
    """``user@host``: who an action is recorded as, unless ``--by`` says."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = "uid?"
    return f"{user}@{socket.gethostname().split('.')[0] or 'host'}"


def canonical_origin(text: str) -> str:
    """``scheme://host[:port]`` as the crawl stores origins (lower case, no default port,
    no path); a ConfigError for anything else."""
    from crashsafe.ids import canonical_url
    from crashsafe.store.hosts import origin_of

    usage = f"--origin {text!r}: give scheme://host[:port], e.g. --origin https://example.com"
    try:
        parts = urlsplit(text.strip())
        parts.port  # noqa: B018  (raises for a port out of range)
    except ValueError as exc:
        raise ConfigError(f"{usage} ({exc})") from exc
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or not _HOST.fullmatch(parts.hostname)
    ):
        raise ConfigError(usage)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ConfigError(
            f"--origin {text!r}: an origin has no path; did you mean "
            f"--origin {parts.scheme}://{parts.netloc}?"
        )
    return origin_of(canonical_url(f"{parts.scheme}://{parts.netloc}/"))


def steering_options(f: F) -> F:
    f = click.option(
        "--by", "actor", default=None, metavar="NAME",
        help="Who the audit records as having done it (default: user@host).",
    )(f)  # fmt: skip
    f = click.option("--crawl", "crawl_name", help="The crawl (default: the only one).")(f)
    return db_option()(f)


def origin_option(f: F) -> F:
    return click.option(
        "--origin", default=None, metavar="ORIGIN",
        help="Only this origin of the crawl (scheme://host[:port]); the others go on.",
    )(f)  # fmt: skip


@click.command()
@steering_options
@origin_option
def pause(db_url: str, crawl_name: str | None, actor: str | None, origin: str | None) -> None:
    """Pause a crawl (or one origin of it): no worker leases another page of it until
    `crashsafe resume`; pages in flight finish and commit, and workers wait."""
    _pause_or_resume(db_url, crawl_name, actor, origin, pausing=True)


@click.command()
@steering_options
@origin_option
def resume(db_url: str, crawl_name: str | None, actor: str | None, origin: str | None) -> None:
    """Resume a paused crawl (or origin): waiting workers lease again within a second."""
    _pause_or_resume(db_url, crawl_name, actor, origin, pausing=False)


def _pause_or_resume(
    db_url: str, crawl_name: str | None, actor: str | None, origin: str | None, *, pausing: bool
) -> None:
    target = canonical_origin(origin) if origin is not None else None
    store = open_db(db_url)
    try:
        crawl = one_crawl(store, crawl_name)
        act = store.pause if pausing else store.resume
        changed = act(crawl, actor=actor or default_actor(), origin=target)
        stats = store.stats(crawl)
        known = target is None or store.knows_origin(crawl, target)
    finally:
        store.close()
    what = f"origin {target} of crawl {crawl}" if target else f"crawl {crawl}"
    if not known:
        click.echo(
            f"note: crawl {crawl} has no URL of {target} yet (a typo?); `crashsafe status` "
            "shows the origins it waits for",
            err=True,
        )
    if pausing:
        if not changed:
            click.echo(f"{what} was paused already")
            return
        flight = ""
        if stats.leased and target is None:
            flight = f"; {stats.leased} page(s) in flight finish first"
        click.echo(
            f"paused {what}: no page of it is leased until "
            f"`crashsafe resume --db {masked(db_url)} --crawl {crawl}"
            f"{f' --origin {target}' if target else ''}`{flight}"
        )
    elif not changed:
        click.echo(f"{what} was not paused")
    else:
        click.echo(f"resumed {what}: its workers lease again")


@click.command()
@steering_options
def cancel(db_url: str, crawl_name: str | None, actor: str | None) -> None:
    """End the runs of every worker of a crawl, as Ctrl-C would: pages in flight commit,
    the rest goes back, each worker exits with status 6. Everything stored is kept: run
    the crawl command again to resume."""
    store = open_db(db_url)
    try:
        crawl = one_crawl(store, crawl_name)
        n = store.cancel(crawl, actor=actor or default_actor())
    finally:
        store.close()
    if n:
        click.echo(f"asked {n} worker(s) of crawl {crawl} to stop; they do within a second")
    else:
        click.echo(f"no worker of crawl {crawl} is running: nothing to cancel")


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Only this crawl.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1))
def audit(db_url: str, crawl_name: str | None, limit: int) -> None:
    """Who paused, resumed, cancelled or retried what, and when (newest first)."""
    store = open_db(db_url, readonly=True)
    try:
        crawl_names(store, crawl_name)
        entries = store.audit(crawl_name, limit=limit)
    finally:
        store.close()
    if not entries:
        click.echo("no action recorded")
        return
    for e in entries:
        target = f" {e.target}" if e.target else ""
        detail = f" ({e.detail})" if e.detail else ""
        line = f"{clock_time(e.at)}  {e.crawl}  {e.action}{target}{detail}  by {e.actor}"
        click.echo(printable(line))
