"""failed, retry: the dead letter, listed (one by one or grouped by error) and re-queued."""

from __future__ import annotations

import click

from crashsafe.cli.common import crawl_names
from crashsafe.cli.options import db_option, group_errors, open_db
from crashsafe.cli.steer_cmds import default_actor
from crashsafe.store import masked
from crashsafe.text import printable


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Only this crawl.")
@click.option("--full", is_flag=True, help="Show whole errors (tracebacks).")
@click.option(
    "--group",
    is_flag=True,
    help="One line per error (values such as numbers and URLs put aside), with its count.",
)
def failed(db_url: str, crawl_name: str | None, full: bool, group: bool) -> None:
    """List URLs in the dead letter, with their last error."""
    store = open_db(db_url, readonly=True)
    try:
        crawl_names(store, crawl_name)
        rows = store.failed(crawl_name)
    finally:
        store.close()
    if not rows:
        click.echo("no failed URLs")
        return
    if group:
        for count, error, example in group_errors(rows):
            click.echo(printable(f"{count:>7,}  {error}  (e.g. {example})"))
    else:
        for row in rows:
            lines = (row.error or "").strip().splitlines() or ["-"]
            error = "\n".join(lines) if full else lines[-1]  # (a traceback's: the exception)
            status_text = row.http_status if row.http_status is not None else "-"
            line = f"{row.crawl}\t{row.url}\tattempts={row.attempts}\tstatus={status_text}"
            click.echo(printable(line))
            if error and error != "-":
                click.echo("    " + printable(error).replace("\n", "\n    "))
    click.echo(
        f"{len(rows)} failed URL(s); `crashsafe retry --db {masked(db_url)}` re-queues them."
    )


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Only this crawl.")
@click.option(
    "--by",
    "actor",
    default=None,
    metavar="NAME",
    help="Who the audit records as having done it (default: user@host).",
)
def retry(db_url: str, crawl_name: str | None, actor: str | None) -> None:
    """Put failed URLs back in the queue; the next `crashsafe crawl` fetches them."""
    store = open_db(db_url)
    try:
        who = actor or default_actor()
        # Crawl by crawl: each audit row names the crawl it re-queued URLs of.
        n = sum(store.retry_failed(name, actor=who) for name in crawl_names(store, crawl_name))
    finally:
        store.close()
    click.echo(f"re-queued {n} URL(s); run the crawl command again to fetch them.")
