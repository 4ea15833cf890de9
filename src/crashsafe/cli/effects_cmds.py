"""recrawl; the passes, versions, files and outbox figures status shows; a run's own figures."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from crashsafe.cli.options import db_option, iso_time, open_db
from crashsafe.durations import seconds
from crashsafe.errors import ConfigError
from crashsafe.store import EffectStats, RunFigures

if TYPE_CHECKING:
    from rich.table import Table


CENTURY = 100 * 365 * 86400.0


def parse_duration(text: str, option: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d``, ``1w`` as seconds."""
    value = seconds(text)
    if value is None:
        raise ConfigError(f"{option} {text!r}: give a duration like 30s, 15m, 2h or 1d")
    return min(value, CENTURY)  # (PostgreSQL's timestamps end in the year 294276)


def run_line(figures: RunFigures) -> str:
    """``this run: 105 requests, 0 new records, 9 changed, 2 gone``."""
    events = figures.events
    gone = events.get("record.gone", 0)
    return (
        f"this run: {figures.requests:,} requests, {events.get('record.created', 0):,} new "
        f"records, {events.get('record.updated', 0):,} changed"
        + (f", {gone:,} gone" if gone else "")
    )


def effects_table(rows: list[EffectStats]) -> Table:
    from rich.table import Table

    table = Table(title="passes, versions, files and webhooks")
    cols = ["crawl", "passes", "last pass began", "versions", "changed records"]
    cols += ["changed in last pass", "gone", "files", "events"]
    cols += ["deliveries pending", "delivered", "failed"]
    for col in cols:
        table.add_column(col, justify="left" if col in {"crawl", "last pass began"} else "right")
    for e in rows:
        d = e.deliveries
        began = "-" if e.last_pass_at is None else iso_time(e.last_pass_at)
        table.add_row(
            e.crawl, f"{e.passes:,}", began,
            *(f"{v:,}" for v in (e.versions, e.records_changed, e.changed_last_pass, e.gone)),
            f"{e.files:,} ({e.file_bytes:,} B)", f"{e.events:,}",
            *(f"{v:,}" for v in (d.get("pending", 0) + d.get("leased", 0),
                                  d.get("delivered", 0), d.get("failed", 0))),
        )  # fmt: skip
    return table


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="The crawl (needed when the database has several).")
@click.option(
    "--older-than",
    default="0s",
    show_default=True,
    help="Only pages fetched at least this long ago (30s, 15m, 2h, 1d, 1w).",
)
def recrawl(db_url: str, crawl_name: str | None, older_than: str) -> None:
    """Queue a crawl's done pages again for a new pass; run `crashsafe crawl` to fetch them.

    A page fetched again that changed gives its records a new version (last_changed
    moves); records its page no longer yields, or whose page is now 404/410, are marked
    gone. `crashsafe export --since last-pass --changed-only` then lists what changed.
    """
    from crashsafe.cli.crawl_cmds import one_crawl

    age = parse_duration(older_than, "--older-than")
    store = open_db(db_url)
    try:
        crawl = one_crawl(store, crawl_name)
        started = store.recrawl(crawl, older_than=age)
    finally:
        store.close()
    if started.requeued == 0:
        which = "done page" if age == 0 else f"page done more than {older_than} ago"
        click.echo(f"{crawl}: no {which} to queue again; no pass begun.")
        return
    click.echo(
        f"{crawl}: pass {started.number} begun, {started.requeued:,} pages queued again; "
        "run the crawl again (the same `crashsafe crawl` command, or Scrapy under the "
        "adapter) to fetch them."
    )
