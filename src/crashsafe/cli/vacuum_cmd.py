"""vacuum: a store that stays small (old outbox events pruned, lease grants folded into
counts, the database compacted)."""

from __future__ import annotations

import click

from crashsafe.cli.common import crawl_names, parse_duration
from crashsafe.cli.options import db_option, open_db
from crashsafe.errors import ConfigError


def _size(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Prune and fold this crawl's rows only (default: all).")
@click.option(
    "--prune-after",
    metavar="DURATION",
    help="First prune outbox events older than this (30d) that no webhook endpoint still "
    "has to deliver: the records' history before then goes.",
)
def vacuum(db_url: str, crawl_name: str | None, prune_after: str | None) -> None:
    """Give the space of deleted rows back: lease grants no figure needs one by one are
    folded into counts, then SQLite's file is rewritten (VACUUM; stop the crawl first),
    PostgreSQL's tables are vacuumed and analyzed (autovacuum does this on its own; see
    docs/continuous.md)."""
    keep = None if prune_after is None else parse_duration(prune_after, "--prune-after")
    store = open_db(db_url)
    try:
        sqlite = store.url.startswith("sqlite:")
        if sqlite:
            alive = [w for w in store.workers() if w.alive]
            if alive:
                pids = ", ".join(f"{w.host} pid {w.pid}" for w in alive[:5])
                raise ConfigError(
                    f"{len(alive)} worker(s) are running on this database ({pids}): stop "
                    "them first (vacuum rewrites the whole file and holds its write lock)"
                )
        for crawl in crawl_names(store, crawl_name):
            if keep is not None:
                pruned = store.prune_outbox(crawl, keep)
                click.echo(
                    f"{crawl}: pruned {pruned.events:,} events older than {prune_after} "
                    f"and {pruned.deliveries:,} of their deliveries"
                )
            folded = store.fold_grants(crawl)
            click.echo(f"{crawl}: {folded:,} lease grants folded into counts")
        before, after = store.compact()
    finally:
        store.close()
    if sqlite:
        click.echo(f"database file: {_size(before)} before, {_size(after)} after VACUUM")
    else:
        click.echo(
            f"tables: {_size(before)} before, {_size(after)} after VACUUM (ANALYZE): the "
            "space of deleted rows is reused, the files do not shrink (autovacuum does "
            "the same on its own schedule)"
        )
