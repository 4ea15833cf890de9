"""history: every stored version of a crawl's records, oldest first."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click

from crashsafe.cli.common import one_crawl
from crashsafe.cli.export_cmd import open_output, output_options
from crashsafe.cli.options import db_option, open_db
from crashsafe.errors import ConfigError
from crashsafe.exports import META_PREFIX, format_of, item_row, write_rows
from crashsafe.store import StoredRecord

EVENT = META_PREFIX + "event"


def version_row(record: StoredRecord, event: str) -> Any:
    """A version as ``export --with-meta`` writes a record, and what made it
    (``_crashsafe_event``: created, updated, gone); ``_crashsafe_last_changed`` is when."""
    row = item_row(record, with_meta=True)
    if EVENT in row:
        raise ConfigError(
            f"record {record.key!r} has a field {EVENT!r} of its own, which crashsafe's "
            "metadata would replace"
        )
    row[EVENT] = event
    return row


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="The crawl (needed when the database has several).")
@click.option(
    "--key", "keys", multiple=True, metavar="KEY",
    help="Only the record with this key (a Record's key, or an item's item_key value); "
         "repeat it for more.",
)  # fmt: skip
@output_options
def history(
    db_url: str, crawl_name: str | None, keys: tuple[str, ...], fmt: str | None, output: str | None
) -> None:
    """Every stored version of each record, oldest first: the item as it was then, with
    crashsafe's metadata (as `export --with-meta`) and `_crashsafe_event` (created,
    updated or gone); `_crashsafe_last_changed` is when that version was made.

    A recrawl that finds a record changed keeps the version it replaces. How far back the
    history goes is the outbox's retention: `deliver --prune-after` (30 days by default,
    with a webhook endpoint) and `vacuum --prune-after` remove older versions; the current
    one is always there.
    """
    fmt = fmt or (format_of(output) if output else "jsonl")
    store = open_db(db_url, readonly=True)
    wanted = set(keys) or None
    found: set[str] = set()  # record ids
    seen_keys: set[str] = set()
    try:
        crawl = one_crawl(store, crawl_name)

        def rows() -> Iterator[Any]:
            for record, event in store.iter_versions(crawl, keys=wanted):
                found.add(record.id)
                seen_keys.add(record.key)
                yield version_row(record, event)

        with open_output(output) as out:
            written = write_rows(rows, out, fmt)
    finally:
        store.close()
    missing = sorted((wanted or set()) - seen_keys)
    if wanted and not found:
        raise ConfigError(f"{crawl}: no record with the key {' or '.join(missing)}")
    if missing:
        click.echo(f"{crawl}: no record with the key {' or '.join(missing)}", err=True)
    click.echo(
        f"wrote {written.rows} version(s) of {len(found)} record(s) to {output or 'stdout'}",
        err=True,
    )
