"""recrawl: a crawl's done pages queued again, as a new pass."""

from __future__ import annotations

import click

from crashsafe.cli.common import one_crawl, parse_duration
from crashsafe.cli.options import db_option, open_db
from crashsafe.errors import ConfigError


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="The crawl (needed when the database has several).")
@click.option(
    "--older-than",
    default="0s",
    show_default=True,
    help="Only pages fetched at least this long ago (30s, 15m, 2h, 1d, 1w).",
)
@click.option(
    "--due", is_flag=True,
    help="Only the pages due for their next visit (from how often each changed; "
         "see `crawl --continuous`).",
)  # fmt: skip
@click.option(
    "--force", is_flag=True,
    help="Queue the pages even while the last pass still has pages pending or leased "
         "(two passes then run at once).",
)  # fmt: skip
@click.option(
    "--retired", is_flag=True,
    help="Queue the retired pages too: those gone (404, 410) at their last three visits, "
         "which passes leave out.",
)  # fmt: skip
def recrawl(
    db_url: str,
    crawl_name: str | None,
    older_than: str,
    due: bool = False,
    force: bool = False,
    retired: bool = False,
) -> None:
    """Queue a crawl's done pages again for a new pass; run `crashsafe crawl` to fetch them.

    A page fetched again that changed gives its records a new version (last_changed
    moves); records its page no longer yields, or whose page is now 404/410, are marked
    gone. `crashsafe export --since last-pass --changed-only` then lists what changed.
    """

    age = parse_duration(older_than, "--older-than")
    store = open_db(db_url)
    try:
        crawl = one_crawl(store, crawl_name)
        store.fold_grants(crawl)  # (the last passes' lease grants become counts)
        # (not while the last pass runs, unless forced: the recrawl is refused then, and
        # would leave them revived all the same)
        revive = retired and (force or not store.due(crawl).open)
        revived = store.revive_retired(crawl) if revive else 0
        started = store.recrawl(crawl, older_than=age, due=due, force=force)
        left_out = store.retired(crawl)
    finally:
        store.close()
    if revived:
        click.echo(f"{crawl}: {revived:,} retired page{'s' if revived != 1 else ''} due again.")
    if started.open:
        raise ConfigError(
            f"{crawl}: pass {started.number} has not ended (pages are pending or leased): "
            "nothing queued. Let it end (run the crawl), or add --force to queue the done "
            "pages anyway (two passes then run at once)."
        )
    if started.requeued == 0:
        which = "done page" if age == 0 else f"page done more than {older_than} ago"
        which = "page due for its next visit" if due else which
        click.echo(f"{crawl}: no {which} to queue again; no pass begun.")
    else:
        click.echo(
            f"{crawl}: pass {started.number} begun, {started.requeued:,} pages queued again; "
            "run the crawl again (the same `crashsafe crawl` command, or Scrapy under the "
            "adapter) to fetch them."
        )
    if left_out:
        click.echo(
            f"{crawl}: {left_out:,} page{'s' if left_out != 1 else ''} not queued: gone "
            "(404, 410) at the last three visits; a page that links to one again brings "
            "it back, or `recrawl --retired`."
        )
