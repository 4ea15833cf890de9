"""crawl, status."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

from crashsafe import aio
from crashsafe.cli import exits
from crashsafe.cli.common import run_line
from crashsafe.cli.options import (
    clock_time,
    db_option,
    fmt_seconds,
    group_errors,
    log_options,
    open_db,
    say,
)
from crashsafe.crawl.scrapy_names import from_scrapy
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError
from crashsafe.store import HighWater, Store, Waiting, masked
from crashsafe.store.liveness import new_run_id
from crashsafe.text import printable

if TYPE_CHECKING:
    from crashsafe.cli.export_cmd import Feed
    from crashsafe.crawl.engine import CrawlResult

INTERRUPTED = "Interrupted: run the same command again to resume."


def parse_sets(pairs: Iterable[str]) -> dict[str, Any]:
    """``-s NAME=VALUE`` options as settings; ``default_headers`` may be given several
    times (``-s "default_headers=Accept-Language: fr"``), each adding one header."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set {pair!r}: use --set name=value")
        name, value = from_scrapy(name.strip(), value.strip())
        parsed = CrawlSettings.parse_value(name, value)
        if name == "default_headers":
            parsed = settings.get(name, ()) + parsed
        settings[name] = parsed
    return settings


def parse_arguments(pairs: Iterable[str]) -> dict[str, str]:
    """``-a NAME=VALUE`` options as spider arguments."""
    found: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"-a {pair!r}: use -a name=value")
        found[name.strip()] = value
    return found


def summary(result: CrawlResult) -> str:
    s = result.stats
    extra = ""
    if s.stale:
        extra += f"; {s.stale:,} stale commits refused (a worker paused past its lease)"
    if s.links_skipped:
        extra += f"; {s.links_skipped:,} malformed or unsupported links skipped"
    if s.links_cut:
        extra += f"; {s.links_cut:,} links beyond max_links_per_page not followed"
    if s.links_offsite:
        extra += f"; {s.links_offsite:,} links outside the allow-list not followed"
    return (
        f"{s.crawl}: {s.done:,} pages done, {s.failed:,} failed, {s.records:,} records; "
        f"{s.requests:,} requests ({s.retries:,} retries, {s.repeated:,} repeated after "
        f"crashes){extra}; {fmt_seconds(result.elapsed)}"
    )


EXIT_FAILED_PAGES = exits.FAILED
EXIT_WAITING = exits.WAITING


def waiting_line(w: Waiting, now: float | None = None) -> str:
    """``1 page waits for robots.txt of http://h:8009: connection refused since 06:31
    UTC, next try 06:33 UTC``."""
    pages = "1 page waits" if w.pages == 1 else f"{w.pages:,} pages wait"
    when = clock_time(w.since)
    next_try = "" if w.next_try is None else f", next try {clock_time(w.next_try)}"
    return printable(f"{pages} for robots.txt of {w.origin}: {w.why or 'unreachable'} "
                     f"since {when}{next_try}")  # fmt: skip


def report_result(result: CrawlResult, db_url: str, this_run: str | None = None) -> None:
    """Print how the run ended and exit accordingly (docs/production.md): 130
    interrupted; 5 stopped waiting on unreachable origins; 1 when the crawl stored
    nothing while URLs failed (every page failed, the start URLs unreachable, a spider
    that yields what cannot be stored); 4 complete with URLs in the dead letter; 0
    complete."""
    s = result.stats
    say(summary(result))
    if this_run is not None:
        say(f"  {this_run}")
    if s.failed:
        store = open_db(db_url, readonly=True)
        try:
            groups = group_errors(store.failed(s.crawl))
        finally:
            store.close()
        for count, error, example in groups[:3]:
            say(printable(f"  {count:,} failed: {error} (e.g. {example})"))
        if len(groups) > 3:
            say(f"  ... and {len(groups) - 3} other error(s)")
        say(
            f"{s.failed} URL(s) failed: see `crashsafe failed --group --db {masked(db_url)}`, "
            f"re-queue with `crashsafe retry --db {masked(db_url)}`."
        )
    if result.cancelled_by is not None:
        say(
            f"Cancelled by {result.cancelled_by} (`crashsafe cancel`); everything committed "
            f"is kept: run the same command again to resume (exit status {exits.CANCELLED})."
        )
        sys.exit(exits.CANCELLED)
    if result.interrupted:
        say(INTERRUPTED)
        sys.exit(130)
    if result.limit is not None:
        left = s.pending + s.leased
        say(f"Stopped at {result.limit} (this run's own limit); {left:,} URL(s) left: run "
            "the same command again to go on.")  # fmt: skip
    if result.gave_up:
        after = f" after {fmt_seconds(result.waited)}" if result.waited else ""
        for w in result.gave_up:
            say(f"  {waiting_line(w)}")
        say(
            f"Stopped waiting{after}: every page left waits for the robots.txt of "
            "an origin that cannot be reached (above); they stay pending. Run the same "
            f"command again later to resume (exit status {EXIT_WAITING})."
        )
        sys.exit(EXIT_WAITING)
    if s.failed and (not s.records or not s.done):
        what = "no page was crawled" if not s.done else "no record was stored"
        say(f"Error: {what} while {s.failed} URL(s) failed (above).")
        sys.exit(1)
    if s.failed:
        sys.exit(EXIT_FAILED_PAGES)


@click.command()
@click.argument("spider")
@db_option()
@click.option("--concurrency", type=click.IntRange(min=1), help="Requests in flight (default 16).")
@click.option("--lease-seconds", type=click.FloatRange(min=0.1), help="Lease length (default 60).")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Fetches before a URL fails.")
@click.option("--start-url", "start_urls", multiple=True, help="Replace the spider's start_urls.")
@click.option("-s", "--set", "sets", multiple=True, metavar="NAME=VALUE", help="Any crawl setting.")
@click.option(
    "-a",
    "arguments",
    multiple=True,
    metavar="NAME=VALUE",
    help="A spider argument (self.NAME), as Scrapy's -a.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="When the crawl is complete, write its items here (.jsonl, .json or .csv), "
    "replacing the file whole: run again, the same command writes each item once.",
)
@click.option(
    "-O",
    "--overwrite-output",
    type=click.Path(dir_okay=False),
    help="The same as -o (Scrapy's spelling for replacing the file).",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Crawl processes (e.g. one per core), each with --concurrency pages.",
)
@click.option(
    "--files",
    "files_dir",
    type=click.Path(file_okay=False),
    help="Where page.download() stores files (default: files/ beside the SQLite database).",
)
@click.option(
    "--warc",
    "warc_dir",
    type=click.Path(file_okay=False),
    help="Also write every response to rotating .warc.gz files in this folder.",
)
@click.option("--store-fd", type=int, hidden=True)  # a worker of --workers: its store socket
@click.option("--parent-fd", type=int, hidden=True)  # a worker of --workers: see workers.py
@click.option("--run-id", hidden=True)  # a worker of --workers: the command's run
@click.option(
    "--metrics-port", type=click.IntRange(1, 65535), default=None, metavar="PORT",
    help="Serve this worker's Prometheus counters on 127.0.0.1:PORT (with --workers N: "
         "PORT, PORT+1, ... one per worker).",
)  # fmt: skip
@click.option(
    "--continuous", is_flag=True,
    help="Keep running: once a pass ends, pages are fetched again as each falls due "
         "(from how often it changed: revisit_min..revisit_max).",
)  # fmt: skip
@click.option(
    "--every", "every", metavar="DURATION",
    help="Keep running: a pass over every page each DURATION (6h, 1d), start to start; "
         "never two passes at once on any number of machines.",
)  # fmt: skip
@click.option(
    "--passes", type=click.IntRange(min=1), default=None, metavar="N",
    help="With --continuous or --every: stop once N passes have ended.",
)  # fmt: skip
@click.option("--no-progress", is_flag=True, help="No live progress line.")
@log_options
def crawl(
    spider: str,
    db_url: str,
    concurrency: int | None,
    lease_seconds: float | None,
    max_attempts: int | None,
    start_urls: tuple[str, ...],
    sets: tuple[str, ...],
    arguments: tuple[str, ...],
    output: str | None,
    overwrite_output: str | None,
    workers: int,
    files_dir: str | None,
    warc_dir: str | None,
    store_fd: int | None,
    parent_fd: int | None,
    run_id: str | None,
    no_progress: bool,
    metrics_port: int | None,
    continuous: bool = False,
    every: str | None = None,
    passes: int | None = None,
) -> None:
    """Crawl with SPIDER (path/file.py[:Class] or module:Class) until nothing is left.

    Kill it at any moment and run the same command again: it resumes, and every record
    ends up stored exactly once. With -o/-O the records are written to a file when the
    crawl is complete, from the database (each record once; the file is replaced whole).
    """
    from crashsafe.cli.export_cmd import Feed

    feed = Feed.from_options(output, overwrite_output)
    from crashsafe.crawl.engine import Crawler
    from crashsafe.crawl.loader import load_spider

    if parent_fd is not None:
        from crashsafe.cli.workers import stop_with_parent

        stop_with_parent(parent_fd)
    from crashsafe.crawl.passes import schedule_of

    schedule = schedule_of(continuous, every, passes)
    spider_cls = load_spider(spider)
    spider_args = parse_arguments(arguments)
    overrides = parse_sets(sets)
    options = {
        "concurrency": concurrency,
        "lease_seconds": lease_seconds,
        "max_attempts": max_attempts,
        "files_dir": files_dir,
        "warc_dir": warc_dir,
    }
    overrides.update((name, value) for name, value in options.items() if value is not None)
    settings = spider_cls.crawl_settings(**overrides)
    progress = not no_progress and sys.stderr.isatty()
    store = open_db(db_url, create=True)
    # This run's id leads its workers' owner ids: "this run" counts their work alone.
    # (A worker of --workers reports nothing: the command that started it does.)
    run = run_id or new_run_id()
    before = store.high_water(run) if parent_fd is None else None
    if workers > 1:
        if os.name != "posix":
            store.close()
            raise ConfigError(
                "--workers needs Linux or macOS; elsewhere, start `crashsafe crawl` once "
                "per worker on the same database"
            )
        args = [spider, "--db", db_url, *(f"--start-url={u}" for u in start_urls)]
        args += [f"--set={pair}" for pair in sets]
        args += [f"-a{pair}" for pair in arguments]
        flag = {"files_dir": "files", "warc_dir": "warc"}
        args += [
            f"--{flag.get(k, k).replace('_', '-')}={v}" for k, v in options.items() if v is not None
        ]
        logging = click.get_current_context().meta
        args += ["--continuous"] if continuous else []
        args += [f"--every={every}"] if every else []
        args += [f"--passes={passes}"] if passes else []
        args += [f"--run-id={run}", f"--log-level={logging.get('log_level', 'INFO')}"]
        args += [f"--log-format={logging.get('log_format', 'text')}"]
        with contextlib.closing(store):
            run_as_workers(
                store, spider_cls.name, workers, args, progress, feed, before, metrics_port
            )
        return
    metrics = None
    if metrics_port is not None:
        from crashsafe.crawl.metrics import WorkerMetrics

        metrics = WorkerMetrics(spider_cls.name)
        try:
            metrics.serve(metrics_port)
        except OSError as exc:
            store.close()
            raise ConfigError(
                f"--metrics-port {metrics_port}: cannot listen on 127.0.0.1:{metrics_port} "
                f"({exc.strerror}); choose another port"
            ) from exc
    try:
        crawler = Crawler(
            spider_cls(**spider_args),
            store,
            settings=settings,
            start_urls=list(start_urls) or None,
            progress=progress,
            store_server=None if store_fd is None else socket.socket(fileno=store_fd),
            run=run,
            metrics=metrics,
            schedule=schedule,
        )
        result = aio.run(crawler.run())
        this_run = None if before is None else run_line(store.since(spider_cls.name, before))
        this_run = with_last_pass(store, spider_cls.name, this_run)
    finally:
        store.close()
    if parent_fd is not None:  # a worker: the command that started it reports
        if result.cancelled_by is not None:
            sys.exit(exits.CANCELLED)
        sys.exit(130 if result.interrupted else EXIT_WAITING if result.gave_up else 0)
    if feed is not None and not result.interrupted:
        feed.write(db_url, spider_cls.name, waiting=bool(result.gave_up))
    report_result(result, db_url, this_run)


def with_last_pass(store: Store, crawl: str, line: str | None) -> str | None:
    """``line``, and what the crawl's last pass did when it was a recrawl (pass 2 on)."""
    if line is None:
        return None
    from crashsafe.crawl.passes import figures_line

    last = store.pass_figures(crawl, limit=1)
    if not last or last[0].number < 2:
        return line
    return f"{line}\n  {figures_line(last[0])}"


def run_as_workers(
    store: Store,
    crawl: str,
    n: int,
    args: list[str],
    progress: bool,
    feed: Feed | None = None,
    before: HighWater | None = None,
    metrics_port: int | None = None,
) -> None:
    """``crawl --workers n``: run the workers, then report for the whole crawl."""
    from crashsafe.cli.workers import run_workers
    from crashsafe.crawl.engine import CrawlResult
    from crashsafe.store.process import how_it_ended

    started = time.monotonic()
    serve = store.url.startswith("sqlite:")  # PostgreSQL: each worker connects itself
    codes = run_workers(
        n, args, store.url, progress=progress, serve_store=serve, metrics_port=metrics_port
    )
    stats = store.stats(crawl)
    this_run = None if before is None else run_line(store.since(crawl, before))
    this_run = with_last_pass(store, crawl, this_run)
    # A worker exits 130 after a Ctrl-C; a second Ctrl-C may catch it after its own
    # handler is gone, and the signal itself ends it: an interruption too, not a failure.
    interrupted = {130, -signal.SIGINT, -signal.SIGTERM, exits.CANCELLED}
    ended = interrupted | {0, EXIT_WAITING}
    broken = [(i, code) for i, code in enumerate(codes, 1) if code not in ended]
    for i, code in broken:
        was = "was " if code < 0 else ""  # "was killed by signal 9", "exited with code 1"
        click.echo(f"worker {i} of {n} {was}{how_it_ended(code)}", err=True)
    stopped = any(code in interrupted for code in codes)
    gave_up: tuple[Waiting, ...] = ()
    if not stopped and EXIT_WAITING in codes:
        gave_up = tuple(w for w in store.waiting(crawl) if w.pages)
    cancelled = None
    if exits.CANCELLED in codes:
        cancelled = next(
            (a.actor for a in store.audit(crawl, limit=20) if a.action == "cancel"), "?"
        )
    result = CrawlResult(
        stopped, time.monotonic() - started, stats, gave_up, cancelled_by=cancelled
    )
    # A worker ends with 0 only once the whole crawl is complete (or it is interrupted).
    if broken and not stopped and 0 not in codes and not gave_up:
        click.echo(summary(result), err=True)
        click.echo("Run the same command again to resume.", err=True)
        sys.exit(1)
    if feed is not None and not stopped:
        feed.write(store.url, crawl, waiting=bool(gave_up))
    report_result(result, store.url, this_run)
