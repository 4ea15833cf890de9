"""crawl, status."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import click

from crashsafe import aio
from crashsafe.cli.effects_cmds import run_line
from crashsafe.cli.options import db_option, fmt_seconds, group_errors, iso_time, open_db
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError
from crashsafe.store import CrawlStats, HighWater, Store, WorkerInfo, masked
from crashsafe.text import printable

if TYPE_CHECKING:
    from rich.table import Table

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
        name = name.strip()
        parsed = CrawlSettings.parse_value(name, value.strip())
        if name == "default_headers":
            parsed = settings.get(name, ()) + parsed
        settings[name] = parsed
    return settings


def summary(result: CrawlResult) -> str:
    s = result.stats
    extra = ""
    if s.stale:
        extra += f"; {s.stale:,} stale commits refused (a worker paused past its lease)"
    if s.links_skipped:
        extra += f"; {s.links_skipped:,} malformed or unsupported links skipped"
    return (
        f"{s.crawl}: {s.done:,} pages done, {s.failed:,} failed, {s.records:,} records; "
        f"{s.requests:,} requests ({s.retries:,} retries, {s.repeated:,} repeated after "
        f"crashes){extra}; {fmt_seconds(result.elapsed)}"
    )


def report_result(result: CrawlResult, db_url: str, this_run: str | None = None) -> None:
    """Print how the run ended and exit accordingly: 130 interrupted; 1 when the crawl
    stored nothing while URLs failed (every page failed, the start URLs unreachable, a
    spider that yields what cannot be stored); 0 otherwise."""
    s = result.stats
    click.echo(summary(result), err=True)
    if this_run is not None:
        click.echo(f"  {this_run}", err=True)
    if s.failed:
        store = open_db(db_url, readonly=True)
        try:
            groups = group_errors(store.failed(s.crawl))
        finally:
            store.close()
        for count, error, example in groups[:3]:
            click.echo(printable(f"  {count:,} failed: {error} (e.g. {example})"), err=True)
        if len(groups) > 3:
            click.echo(f"  ... and {len(groups) - 3} other error(s)", err=True)
        click.echo(
            f"{s.failed} URL(s) failed: see `crashsafe failed --group --db {masked(db_url)}`, "
            f"re-queue with `crashsafe retry --db {masked(db_url)}`.",
            err=True,
        )
    if result.interrupted:
        click.echo(INTERRUPTED, err=True)
        sys.exit(130)
    if s.failed and (not s.records or not s.done):
        what = "no page was crawled" if not s.done else "no record was stored"
        click.echo(f"Error: {what} while {s.failed} URL(s) failed (above).", err=True)
        sys.exit(1)


@click.command()
@click.argument("spider")
@db_option()
@click.option("--concurrency", type=click.IntRange(min=1), help="Requests in flight (default 16).")
@click.option("--lease-seconds", type=click.FloatRange(min=0.1), help="Lease length (default 60).")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Fetches before a URL fails.")
@click.option("--start-url", "start_urls", multiple=True, help="Replace the spider's start_urls.")
@click.option("-s", "--set", "sets", multiple=True, metavar="NAME=VALUE", help="Any crawl setting.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    help="When the crawl is complete, write its records here (.jsonl, .json or .csv); "
    "refused if the file exists.",
)
@click.option(
    "-O",
    "--overwrite-output",
    type=click.Path(dir_okay=False),
    help="As -o, replacing the file if it exists.",
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
@click.option("--no-progress", is_flag=True, help="No live progress line.")
def crawl(
    spider: str,
    db_url: str,
    concurrency: int | None,
    lease_seconds: float | None,
    max_attempts: int | None,
    start_urls: tuple[str, ...],
    sets: tuple[str, ...],
    output: str | None,
    overwrite_output: str | None,
    workers: int,
    files_dir: str | None,
    warc_dir: str | None,
    store_fd: int | None,
    parent_fd: int | None,
    no_progress: bool,
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
    spider_cls = load_spider(spider)
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
    # (a worker of --workers reports nothing: the command that started it does)
    before = store.high_water() if parent_fd is None else None
    if workers > 1:
        if os.name != "posix":
            store.close()
            raise ConfigError(
                "--workers needs Linux or macOS; elsewhere, start `crashsafe crawl` once "
                "per worker on the same database"
            )
        args = [spider, "--db", db_url, *(f"--start-url={u}" for u in start_urls)]
        args += [f"--set={pair}" for pair in sets]
        flag = {"files_dir": "files", "warc_dir": "warc"}
        args += [
            f"--{flag.get(k, k).replace('_', '-')}={v}" for k, v in options.items() if v is not None
        ]
        with contextlib.closing(store):
            run_as_workers(store, spider_cls.name, workers, args, progress, feed, before)
        return
    try:
        crawler = Crawler(
            spider_cls(),
            store,
            settings=settings,
            start_urls=list(start_urls) or None,
            progress=progress,
            store_server=None if store_fd is None else socket.socket(fileno=store_fd),
        )
        result = aio.run(crawler.run())
        this_run = None if before is None else run_line(store.since(spider_cls.name, before))
    finally:
        store.close()
    if parent_fd is not None:  # a worker: the command that started it reports
        sys.exit(130 if result.interrupted else 0)
    if feed is not None and not result.interrupted:
        feed.write(db_url, spider_cls.name)
    report_result(result, db_url, this_run)


def run_as_workers(
    store: Store,
    crawl: str,
    n: int,
    args: list[str],
    progress: bool,
    feed: Feed | None = None,
    before: HighWater | None = None,
) -> None:
    """``crawl --workers n``: run the workers, then report for the whole crawl."""
    from crashsafe.cli.workers import run_workers
    from crashsafe.crawl.engine import CrawlResult
    from crashsafe.store.process import how_it_ended

    started = time.monotonic()
    serve = store.url.startswith("sqlite:")  # PostgreSQL: each worker connects itself
    codes = run_workers(n, args, store.url, progress=progress, serve_store=serve)
    stats = store.stats(crawl)
    this_run = None if before is None else run_line(store.since(crawl, before))
    # A worker exits 130 after a Ctrl-C; a second Ctrl-C may catch it after its own
    # handler is gone, and the signal itself ends it: an interruption too, not a failure.
    interrupted = {130, -signal.SIGINT, -signal.SIGTERM}
    broken = [(i, code) for i, code in enumerate(codes, 1) if code not in interrupted | {0}]
    for i, code in broken:
        was = "was " if code < 0 else ""  # "was killed by signal 9", "exited with code 1"
        click.echo(f"worker {i} of {n} {was}{how_it_ended(code)}", err=True)
    stopped = any(code in interrupted for code in codes)
    result = CrawlResult(stopped, time.monotonic() - started, stats)
    # A worker ends with 0 only once the whole crawl is complete (or it is interrupted).
    if broken and not stopped and 0 not in codes:
        click.echo(summary(result), err=True)
        click.echo("Run the same command again to resume.", err=True)
        sys.exit(1)
    if feed is not None and not stopped:
        feed.write(store.url, crawl)
    report_result(result, store.url, this_run)


def stats_table(rows: list[CrawlStats]) -> Table:
    from rich.table import Table

    table = Table(title="crawls")
    cols = ["crawl", "pending", "leased", "done", "failed", "records", "lease grants"]
    cols += ["requests", "retries", "repeated", "stale commits refused", "links skipped"]
    cols += ["requests/record"]
    for col in cols:
        table.add_column(col, justify="left" if col == "crawl" else "right")
    for s in rows:
        rpr = f"{s.requests_per_record:.3f}" if s.requests_per_record is not None else "-"
        table.add_row(
            s.crawl,
            *(f"{v:,}" for v in (s.pending, s.leased, s.done, s.failed, s.records)),
            *(f"{v:,}" for v in (s.lease_grants, s.requests, s.retries, s.repeated)),
            *(f"{v:,}" for v in (s.stale, s.links_skipped)),
            rpr,
        )
    return table


def workers_table(workers: list[WorkerInfo]) -> Table:
    from rich.table import Table

    table = Table(title="workers")
    for col in ["crawl", "host", "pid", "started", "alive", "leases held", "pages committed"]:
        table.add_column(col, justify="right" if col in {"pid", "leases held"} else "left")
    for w in workers:
        alive = "yes" if w.alive else "no (dead: its leases come back at the next claim)"
        table.add_row(
            w.crawl, printable(w.host), str(w.pid), iso_time(w.started_at), alive,
            f"{w.leases:,}", f"{w.pages:,}",
        )  # fmt: skip
    return table


def crawl_names(store: Store, crawl: str | None) -> list[str]:
    names = store.crawls()
    if crawl is not None:
        if crawl not in names:
            raise ConfigError(
                f"no crawl named {crawl!r} in {masked(store.url)}; it has: {names or 'none'}"
            )
        return [crawl]
    return names


def one_crawl(store: Store, crawl: str | None) -> str:
    """The crawl a command that works on one crawl is about: ``--crawl``, or the only one."""
    names = crawl_names(store, crawl)
    if not names:
        raise ConfigError(f"{masked(store.url)} holds no crawl yet: run `crashsafe crawl` first")
    if len(names) > 1:
        raise ConfigError(
            f"{masked(store.url)} has {len(names)} crawls ({', '.join(names)}): choose one "
            "with --crawl"
        )
    return names[0]


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Only this crawl.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def status(db_url: str, crawl_name: str | None, as_json: bool) -> None:
    """Per crawl: URLs by state, records, lease grants, requests and repeats; passes,
    record versions, gone records, files and webhook deliveries; and the workers: alive,
    or dead while still holding leases."""
    from crashsafe.cli.effects_cmds import effects_table

    store = open_db(db_url, readonly=True)
    try:
        names = crawl_names(store, crawl_name)
        rows = [store.stats(name) for name in names]
        effects = [store.effect_stats(name) for name in names]
        workers = store.workers(crawl_name)
    finally:
        store.close()
    if as_json:
        out = []
        for s, e in zip(rows, effects, strict=True):
            item = {k: getattr(s, k) for k in s.__dataclass_fields__}
            item["effects"] = dataclasses.asdict(e)
            if e.last_pass_at is not None:  # ISO, as every other time in the output
                item["effects"]["last_pass_at"] = iso_time(e.last_pass_at)
            item["known"], item["requests_per_record"] = s.known, s.requests_per_record
            item["workers"] = [
                {**dataclasses.asdict(w), "started_at": iso_time(w.started_at)}
                for w in workers
                if w.crawl == s.crawl
            ]
            out.append(item)
        click.echo(json.dumps(out, indent=2))
    elif not rows:
        click.echo(f"no crawls in {masked(db_url)}")
    else:
        # Piped output keeps whole column names instead of the 80-column default.
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(stats_table(rows))
        console.print(effects_table(effects))
        if workers:
            console.print(workers_table(workers))
