"""killtest: the crash experiment."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click

from crashsafe.errors import ConfigError


def parse_window(text: str) -> tuple[float, float]:
    try:
        low, high = (float(p) for p in text.split(":"))
    except ValueError:
        raise ConfigError(f"--kill-window {text!r}: use A:B, e.g. 0.2:1.0") from None
    return low, high


@click.command()
@click.option(
    "--mode",
    type=click.Choice(["crawl", "batch", "batch-api"]),
    default="crawl",
    show_default=True,
    help="batch: kill an LLM classification job instead of a crawl; batch-api: the same "
    "job through a provider's Batch API (the local stand-in), at each step of a chunk's life.",
)
@click.option("--runs", default=5, show_default=True, type=click.IntRange(1))
@click.option("--kills", default=10, show_default=True, type=click.IntRange(0))
@click.option(
    "--kill-window",
    default="0.2:1.0",
    show_default=True,
    help="Crawl: kill k lands after u·P/(workers·kills) requests of the restarted process "
    "(P: the shop's pages); batch: after u·60/kills calls of the restarted job (an "
    "uninterrupted job makes 20); u uniform in A:B.",
)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(1))
@click.option(
    "--lease-ahead",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="crashsafe's lease_ahead setting; the bound becomes (concurrency + N) × kills.",
)
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Processes per scraper at once, each killed independently.",
)
@click.option(
    "--signal",
    "sig_name",
    type=click.Choice(["KILL", "INT", "TERM"]),
    default="KILL",
    show_default=True,
    help="INT/TERM: graceful stops instead of SIGKILL.",
)
@click.option("--listings", default=25, show_default=True, type=click.IntRange(1))
@click.option("--per-listing", default=20, show_default=True, type=click.IntRange(1))
@click.option(
    "--latency-ms",
    type=click.FloatRange(0),
    help="Per-page delay of the shop (default 10 ms), per call of the LLM server with "
    "--mode batch (default 300 ms): like a real site or model, and long enough to kill.",
)
@click.option(
    "--error-rate",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Share of pages answering 500/503 on the first attempt.",
)
@click.option("--tracking", is_flag=True, help="Products also linked with utm_/ref params.")
@click.option("--dup-links", is_flag=True, help="Listings link products twice, and back.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Every figure.")
@click.option("--chart", "chart_path", type=click.Path(dir_okay=False), help=".svg or .html")
@click.option("--keep", type=click.Path(file_okay=False), help="Keep the databases here.")
@click.option(
    "--scraper",
    type=click.Choice(["crashsafe", "scrapy"]),
    default="crashsafe",
    show_default=True,
    help="scrapy: an ordinary Scrapy spider under crashsafe's adapter (crashsafe[scrapy]), "
    "beside the same spider with Scrapy's JOBDIR, instead of crashsafe crawl beside the "
    "naive scraper.",
)
@click.option(
    "--db",
    "db",
    metavar="postgresql://...",
    help="Run crashsafe on this PostgreSQL database (a schema per run, dropped at the end "
    "unless --keep) instead of SQLite files.",
)
@click.option(
    "--effects",
    is_flag=True,
    help="crashsafe also downloads every product's picture and writes a WARC archive; "
    "then its outbox is delivered to a local receiver while the dispatcher is killed too.",
)
@click.option(
    "--render",
    is_flag=True,
    help="The shop's product pages are built by JavaScript (demo-site --js) and crashsafe "
    "renders them in Chromium; after every kill, no Chromium of the killed crawl may be "
    "left running.",
)
def killtest(
    mode: str,
    runs: int,
    kills: int,
    kill_window: str,
    seed: int,
    concurrency: int,
    lease_ahead: int,
    workers: int,
    sig_name: str,
    listings: int,
    per_listing: int,
    latency_ms: float | None,
    error_rate: float,
    tracking: bool,
    dup_links: bool,
    json_path: str | None,
    chart_path: str | None,
    keep: str | None,
    scraper: str,
    db: str | None,
    effects: bool,
    render: bool,
) -> None:
    """Kill a naive scraper and crashsafe at the same random moments; compare what they store.

    Exit status 0 when crashsafe kept its guarantee in every run (exactly one correct row
    per product, none missing, repeated requests within (concurrency + lease ahead) × kills)
    and at least one kill landed, 1 otherwise (NOT TESTED when no kill landed).
    The naive scraper is expected to fail: that is the point.
    """
    if scraper == "scrapy":
        import importlib.util

        if importlib.util.find_spec("scrapy") is None:
            raise ConfigError("--scraper scrapy needs Scrapy: pip install 'crashsafe[scrapy]'")
    if mode in ("batch", "batch-api"):
        crawl_only = {
            "--workers": workers != 1, "--lease-ahead": lease_ahead != 0,
            "--tracking": tracking, "--dup-links": dup_links,
            "--error-rate": error_rate > 0, "--chart": chart_path is not None,
            "--listings/--per-listing": (listings, per_listing) != (25, 20),
            "--db": db is not None, "--scraper": scraper != "crashsafe",
            "--effects": effects,
            "--render": render,
        }  # fmt: skip
        given = [name for name, used in crawl_only.items() if used]
        if given:
            raise ConfigError(f"{', '.join(given)}: crawl kill test only (drop --mode {mode})")
        if mode == "batch-api":
            if sig_name != "KILL" or kill_window != "0.2:1.0" or latency_ms is not None:
                raise ConfigError("--signal, --kill-window, --latency-ms: not with --mode "
                                  "batch-api (it kills with SIGKILL at each step)")  # fmt: skip
            batch_api_killtest(runs, kills, seed, json_path, keep)
            return
        batch_killtest(runs, kills, kill_window, seed, concurrency, sig_name, latency_ms,
                       json_path, keep)  # fmt: skip
        return
    from crashsafe.demo.shop import ShopOptions
    from crashsafe.killtest import KillTestOptions, run_killtest
    from crashsafe.killtest.chart import write_chart
    from crashsafe.killtest.report import print_report, to_json

    options = KillTestOptions(
        runs=runs,
        kills=kills,
        kill_window=parse_window(kill_window),
        seed=seed,
        concurrency=concurrency,
        lease_ahead=lease_ahead,
        workers=workers,
        sig=signal.Signals[f"SIG{sig_name}"],
        db=check_db(db),
        scraper=scraper,
        effects=effects,
        render=render,
        shop=ShopOptions(
            listings=listings,
            per_listing=per_listing,
            latency_ms=10.0 if latency_ms is None else latency_ms,
            error_rate=error_rate,
            tracking=tracking,
            dup_links=dup_links,
            seed=seed,
            js=1.0 if render else 0.0,
        ),
    )
    result = run_killtest(
        options,
        workdir=Path(keep) if keep else None,
        on_progress=lambda line: click.echo(line, err=True),
    )
    print_report(result)
    if json_path:
        Path(json_path).write_text(json.dumps(to_json(result), indent=2) + "\n")
        click.echo(f"figures written to {json_path}", err=True)
    if chart_path:
        write_chart(result, Path(chart_path))
        click.echo(f"chart written to {chart_path}", err=True)
    sys.exit(0 if result.holds else 1)


def check_db(db: str | None) -> str | None:
    """``--db``: a PostgreSQL URL that opens (the kill test's own SQLite files otherwise)."""
    if db is None:
        return None
    if not db.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            f"--db {db!r}: give a postgresql:// database (SQLite is the default, one file per run)"
        )
    from crashsafe.store import open_store

    open_store(db).close()  # a clear error now rather than a failed calibration
    return db


def batch_killtest(
    runs: int,
    kills: int,
    kill_window: str,
    seed: int,
    concurrency: int,
    sig_name: str,
    latency_ms: float | None,
    json_path: str | None,
    keep: str | None,
) -> None:
    from crashsafe.killtest.batch_mode import BatchKillOptions, run_batch_killtest
    from crashsafe.killtest.batch_report import batch_json, holds, print_batch_report

    options = BatchKillOptions(
        runs=runs,
        kills=kills,
        kill_window=parse_window(kill_window),
        seed=seed,
        concurrency=concurrency,
        latency_ms=300.0 if latency_ms is None else latency_ms,
        sig=signal.Signals[f"SIG{sig_name}"],
    )
    calibration, results = run_batch_killtest(
        options,
        workdir=Path(keep) if keep else None,
        on_progress=lambda line: click.echo(line, err=True),
    )
    print_batch_report(options, results)
    if json_path:
        Path(json_path).write_text(json.dumps(batch_json(options, calibration, results), indent=2))
        click.echo(f"figures written to {json_path}", err=True)
    sys.exit(0 if holds(options, results) else 1)


def batch_api_killtest(
    runs: int, kills: int, seed: int, json_path: str | None, keep: str | None
) -> None:
    from crashsafe.killtest.batch_api_mode import BatchApiKillOptions, run_batch_api_killtest
    from crashsafe.killtest.batch_api_report import batch_api_json, holds, print_batch_api_report

    options = BatchApiKillOptions(runs=runs, kills=kills, seed=seed)
    results = run_batch_api_killtest(
        options,
        workdir=Path(keep) if keep else None,
        on_progress=lambda line: click.echo(line, err=True),
    )
    print_batch_api_report(options, results)
    if json_path:
        Path(json_path).write_text(json.dumps(batch_api_json(options, results), indent=2))
        click.echo(f"figures written to {json_path}", err=True)
    sys.exit(0 if holds(options, results) else 1)
