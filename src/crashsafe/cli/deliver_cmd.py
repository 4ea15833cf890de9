"""deliver: send a crawl's outbox to a webhook; list and replay failed deliveries."""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import click

from crashsafe import aio
from crashsafe.cli import exits
from crashsafe.cli.common import one_crawl, parse_duration
from crashsafe.cli.options import (
    db_option,
    fmt_seconds,
    iso_time,
    log_options,
    open_db,
)
from crashsafe.errors import ConfigError
from crashsafe.failures import short_error
from crashsafe.store import Store, masked
from crashsafe.text import printable, shown_endpoint

if TYPE_CHECKING:
    from crashsafe.effects.dispatch import DeliveryReport, Dispatcher

SECRET_ENV = "CRASHSAFE_WEBHOOK_SECRET"


def _check_webhook(url: str) -> str:
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"--webhook {masked(url)!r}: give an http:// or https:// URL")
    return url


def _finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value):
        raise click.BadParameter("give a finite number of seconds")
    return value


def _list_failed(store: Store, crawl: str, webhook: str | None) -> None:
    rows = store.failed_deliveries(crawl, webhook)
    if not rows:
        click.echo(f"{crawl}: no failed delivery")
        return
    for r in rows:
        when = "-" if r.failed_at is None else iso_time(r.failed_at)
        click.echo(
            printable(
                f"{when}  {shown_endpoint(r.endpoint_url)}  {r.type} {r.record_id} v{r.version}  "
                f"{r.attempts} attempts: {short_error(r.error)}"
            )
        )
    click.echo(f"{len(rows)} failed: `crashsafe deliver --replay` sends them again.", err=True)


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="The crawl (needed when the database has several).")
@click.option("--webhook", help="The endpoint URL events are POSTed to.")
@click.option(
    "--secret",
    envvar=SECRET_ENV,
    help=f"whsec_... signing secret (better: the {SECRET_ENV} variable; an option is "
    "visible to other users in the process list).",
)
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(1, 256))
@click.option(
    "--timeout", default=10.0, show_default=True, type=click.FloatRange(0.1), callback=_finite
)
@click.option(
    "--retry-schedule",
    help="Waits after failed attempts, comma-separated (e.g. 5s,5m,30m,2h); default the "
    "Standard Webhooks schedule over about 3 days.",
)
@click.option(
    "--lease-seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(1),
    callback=_finite,
    help="How long a delivery in flight is this dispatcher's (a killed one's come back).",
)
@click.option("--follow", is_flag=True, help="Keep delivering new events until Ctrl-C.")
@click.option(
    "--max-wait",
    default="60s",
    show_default=True,
    help="Without --follow, stop when the next delivery is due later than this.",
)
@click.option(
    "--prune-after",
    default="30d",
    show_default=True,
    help="Prune events older than this once no endpoint still has them to deliver "
    "(the outbox is the records' history: `never` keeps it all).",
)
@click.option("--failed", "list_failed", is_flag=True, help="List failed deliveries and exit.")
@click.option(
    "--replay",
    is_flag=True,
    help="Queue failed deliveries again (and turn a disabled endpoint back on), then exit.",
)
@click.option(
    "--remove",
    is_flag=True,
    help="Forget the --webhook endpoint and its deliveries (a mistyped URL), then exit.",
)
@log_options
def deliver(
    db_url: str,
    crawl_name: str | None,
    webhook: str | None,
    secret: str | None,
    concurrency: int,
    timeout: float,
    retry_schedule: str | None,
    lease_seconds: float,
    follow: bool,
    max_wait: str,
    list_failed: bool,
    replay: bool,
    remove: bool,
    prune_after: str = "30d",
) -> None:
    """POST the crawl's record events (created, updated, gone) to a webhook, signed per
    Standard Webhooks, each until the endpoint answers 2xx or the retry schedule is spent.

    Kill it and run it again: an event is sent again only if its answer was not stored,
    with the same webhook-id, so a receiver that drops ids it has seen processes each
    event once. Several dispatchers may run at once.
    """
    from crashsafe.effects.webhooks import RetrySchedule, Signer

    if list_failed or replay or remove:
        if remove and webhook is None:
            raise ConfigError("--remove needs --webhook URL: the endpoint to forget")
        store = open_db(db_url, readonly=list_failed)
        try:
            crawl = one_crawl(store, crawl_name)
            if list_failed:
                _list_failed(store, crawl, webhook)
            elif replay:
                n = store.replay_deliveries(crawl, webhook)
                click.echo(f"{crawl}: {n} failed deliveries queued again")
            else:
                assert webhook is not None
                n = store.remove_endpoint(crawl, webhook)
                if n < 0:
                    raise ConfigError(f"{crawl} has no endpoint {masked(webhook)}")
                gone = f"endpoint {masked(webhook)} and its {n} deliveries removed"
                click.echo(f"{crawl}: {gone}")
        finally:
            store.close()
        return
    if webhook is None:
        raise ConfigError("give --webhook URL (the endpoint to POST events to)")
    if not secret:
        raise ConfigError(
            f"give the endpoint's signing secret: set {SECRET_ENV}=whsec_... (or --secret)"
        )
    signer = Signer(secret)
    schedule = RetrySchedule.parse(retry_schedule) if retry_schedule else RetrySchedule()
    wait = parse_duration(max_wait, "--max-wait")
    keep = None if prune_after == "never" else parse_duration(prune_after, "--prune-after")
    store = open_db(db_url)
    try:
        crawl = one_crawl(store, crawl_name)
        from crashsafe.effects.dispatch import Dispatcher

        dispatcher = Dispatcher(
            store, crawl, _check_webhook(webhook), signer, schedule, concurrency=concurrency,
            timeout=timeout, lease_seconds=lease_seconds, max_wait=wait, prune_after=keep,
        )  # fmt: skip
        report = _run(dispatcher, follow)
        still = store.find_endpoint(crawl, webhook)  # (None: removed meanwhile)
        left = {} if still is None else store.endpoint_deliveries(still.id)
    finally:
        store.close()
    _report(report, left)


def _run(dispatcher: Dispatcher, follow: bool) -> DeliveryReport:
    from crashsafe.interrupts import GracefulInterrupts

    async def go() -> DeliveryReport:
        async with GracefulInterrupts(dispatcher.stop, enabled=os.name == "posix"):
            return await dispatcher.run(follow=follow)

    return aio.run(go())


def _report(report: DeliveryReport, left: dict[str, int]) -> None:
    click.echo(
        f"delivered {report.delivered:,}, failed {report.failed:,} (retries spent), "
        f"{report.retried:,} attempts to be retried; to this endpoint in all: "
        f"{left.get('delivered', 0):,} delivered, "
        f"{left.get('pending', 0) + left.get('leased', 0):,} pending, "
        f"{left.get('failed', 0):,} failed",
        err=True,
    )
    for error, count in sorted(report.errors.items(), key=lambda kv: -kv[1])[:3]:
        click.echo(printable(f"  {count:,} attempts: {error}"), err=True)
    if report.pruned_events or report.pruned_deliveries:
        click.echo(
            f"pruned {report.pruned_events:,} old events and {report.pruned_deliveries:,} "
            "of their deliveries (--prune-after)",
            err=True,
        )
    if report.waiting is not None:
        click.echo(
            f"The next retry is due in {fmt_seconds(report.waiting)}: run the same command "
            "again then, or keep one running with --follow.",
            err=True,
        )
    if report.interrupted:
        click.echo("Interrupted: run the same command again to resume.", err=True)
        sys.exit(130)
    if report.removed:
        click.echo(
            "Error: the endpoint was removed (`crashsafe deliver --remove`) while this ran; "
            "`crashsafe deliver --webhook URL` adds it again, with the whole outbox.",
            err=True,
        )
        sys.exit(1)
    if report.disabled:
        click.echo(
            f"Error: endpoint disabled ({report.disabled}); once it accepts webhooks again, "
            "`crashsafe deliver --replay` turns it back on.",
            err=True,
        )
        sys.exit(1)
    if left.get("failed"):
        click.echo("Some deliveries failed: `crashsafe deliver --failed` lists them.", err=True)
        sys.exit(exits.FAILED)
    if report.retried and report.waiting is not None:
        # The receiver failed this run's attempts (down, or refusing them): the run ends
        # with deliveries still failing, which a cron line must be told.
        click.echo(
            f"{report.retried:,} attempts failed in this run and wait for a retry: the "
            "receiver is not taking them (see above).",
            err=True,
        )
        sys.exit(exits.FAILED)
