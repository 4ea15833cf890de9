"""demo-site and demo: the demo shop, and a whole crawl of it in one command."""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from crashsafe import aio
from crashsafe.cli.crawl_cmds import report_result, summary
from crashsafe.cli.options import fmt_seconds, program, serve_until_interrupted
from crashsafe.errors import ConfigError

if TYPE_CHECKING:
    from crashsafe.demo.shop import ShopOptions, ShopThread


def shop_options(f: click.decorators.FC) -> click.decorators.FC:
    for option in reversed(
        [
            click.option("--listings", default=25, show_default=True, type=click.IntRange(1)),
            click.option("--per-listing", default=20, show_default=True, type=click.IntRange(1)),
            click.option("--latency-ms", default=0.0, show_default=True, type=click.FloatRange(0)),
            click.option(
                "--error-rate",
                default=0.0,
                show_default=True,
                type=click.FloatRange(0, 1),
                help="Share of pages whose first request(s) answer 500/503.",
            ),
            click.option(
                "--error-attempts",
                default=1,
                show_default=True,
                type=click.IntRange(1),
                help="Requests of an erroring page that fail before it answers.",
            ),
            click.option("--tracking", is_flag=True, help="Also link products with utm_/ref."),
            click.option("--dup-links", is_flag=True, help="Link products twice, and back."),
            click.option(
                "--pager",
                default=1,
                show_default=True,
                type=click.IntRange(1),
                help="Listings each listing links (next, then page numbers).",
            ),
            click.option("--seed", default=0, show_default=True, type=int),
            click.option(
                "--page-kb",
                default=0,
                show_default=True,
                type=click.IntRange(0, 10_000),
                help="Add about this many KB of a real page's weight (styles, structured "
                "data, a menu and footer the demo spider ignores) to every page.",
            ),
            click.option(
                "--round",
                default=0,
                show_default=True,
                type=click.IntRange(0),
                help="Serve the shop as of this repricing round: each round changes about "
                "10 % of prices and discontinues about 2 % of products (404), so a "
                "`crashsafe recrawl` has changes to find.",
            ),
        ]
    ):
        f = option(f)
    return f


@contextlib.contextmanager
def _shop_thread(
    options: ShopOptions, port: int, *, resuming: bool = False
) -> Iterator[ShopThread]:
    from crashsafe.demo.shop import ShopThread

    site = ShopThread(options, port=port)
    try:
        site.__enter__()
    except OSError as exc:
        what = (
            "the database's URLs point at this port (is a demo still running on it? let it "
            "finish, or stop what holds the port)"
            if resuming
            else "pass another --port"
        )
        raise ConfigError(
            f"cannot start the demo shop on 127.0.0.1:{port} ({exc.strerror}): {what}"
        ) from exc
    try:
        yield site
    finally:
        site.__exit__(None, None, None)


def _demo_port(path: Path) -> int | None:
    """The port of the demo shop the database at ``path`` was crawled from (None: no such
    database yet, or no URL in it)."""
    if not path.exists():
        return None
    import sqlite3
    from urllib.parse import quote, urlsplit

    try:
        db = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            row = db.execute("SELECT url FROM frontier ORDER BY id LIMIT 1").fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None  # (not a crashsafe database: opening it says so)
    try:
        return urlsplit(row[0]).port if row and isinstance(row[0], str) else None
    except ValueError:  # (a port out of range: not the demo's URL)
        return None


def _crawled_now(path: Path) -> bool:
    """Whether a live process (a demo, a crawl) works on the database at ``path``: its
    workers' liveness locks are held."""
    from crashsafe.store.liveness import LockDir

    folder = Path(f"{path}-workers")
    if not folder.is_dir():
        return False
    locks = LockDir(folder)
    return any(locks.is_alive(lock.stem) for lock in folder.glob("*.lock"))


DEMO_LOCK = "demo.flock"  # (not ``*.lock``: no worker's liveness lock, never unlinked)


@contextlib.contextmanager
def _only_demo(path: Path) -> Iterator[None]:
    """Hold the one-demo-per-database lock for the block, or refuse: a second demo on the
    same file would crawl it from a shop of its own, on another port. The lock is a file
    that stays (unlinking a lock file races with a process that opened it just before)."""
    import fcntl
    import os

    from crashsafe.files import open_private, private_folder

    folder = Path(f"{path}-workers")
    try:
        private_folder(folder)
        fd = open_private(folder / DEMO_LOCK, os.O_RDWR | os.O_CREAT, follow=False)
    except OSError as exc:
        raise ConfigError(
            f"cannot use {path}: {exc.strerror or exc} (a read-only file system, or no "
            "permission): choose a folder you can write with --db"
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"another demo is running on {path}: let it finish (or stop "
                "it), or pass another --db"
            ) from None
        if _crawled_now(path):
            raise ConfigError(
                f"{path} is being crawled right now (a crawl on it is running): let it "
                "finish or stop it first, or pass another --db"
            )
        yield
    finally:
        os.close(fd)


def _delete_database(path: Path) -> None:
    """--fresh: the database, its journal files and its stale lock files (the demo's own
    lock stays: it is held). Asked again here: a crawl may have started on the file while
    the shop was starting."""
    if _crawled_now(path):
        raise ConfigError(f"{path} is being crawled right now (a crawl on it started): "
                          "--fresh deletes nothing; let it finish or stop it first")  # fmt: skip
    path.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    workers = Path(f"{path}-workers")
    for lock in workers.iterdir() if workers.is_dir() else ():
        if lock.name != DEMO_LOCK and not lock.is_dir():
            lock.unlink(missing_ok=True)


@click.command("demo-site")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--members",
    is_flag=True,
    help="Serve the members-only shop instead (login, cookies, a POST search API, a "
    "sitemap; for examples/members.py).",
)
@click.option(
    "--js",
    "js",
    flag_value=1.0,
    type=float,
    help="Build product pages with JavaScript (no name or price in their HTML until the "
    "script runs): for rendering (docs/rendering.md).",
)
@click.option(
    "--js-share",
    "js",
    type=click.FloatRange(0, 1),
    help="Build this share of product pages with JavaScript (the rest stay plain HTML).",
)
@shop_options
def demo_site(port: int, members: bool, js: float | None, **shop: Any) -> None:
    """Serve the demo shop on 127.0.0.1 until Ctrl-C.

    Listing pages /list/N link their products and the next listing; /stats counts the
    requests the server saw; /catalogue is the ground truth.
    """
    from crashsafe.demo.shop import Shop, ShopOptions

    if members:
        from crashsafe.demo.members import Members

        serve_until_interrupted(
            Members().app(),
            port,
            announce=lambda bound: (
                f"members-only shop: http://127.0.0.1:{bound}/login (user demo, password "
                "secret; truth at /truth, stats at /stats). Ctrl-C stops it."
            ),
            name="members shop",
        )
        return

    options = ShopOptions(**shop, js=js or 0.0)
    serve_until_interrupted(
        Shop(options).app(),
        port,
        announce=lambda bound: (
            f"demo shop: http://127.0.0.1:{bound}/list/0  "
            f"({options.products} products, {options.pages} pages; stats at /stats). "
            "Ctrl-C stops it."
        ),
        name="demo shop",
    )


@click.command()
@click.option(
    "--db",
    "db_path",
    default="crashsafe-demo.db",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="SQLite file to crawl into.",
)
@click.option(
    "--port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Port of the in-process demo shop. Default: the one the database was crawled "
    "from (its URLs point there: a killed demo resumes), else a free one.",
)
@click.option("--fresh", is_flag=True, help="Delete the demo database first.")
@click.option("--concurrency", default=16, show_default=True, type=click.IntRange(1))
@click.option("--no-progress", is_flag=True)
@shop_options
def demo(
    db_path: str,
    port: int | None,
    fresh: bool,
    concurrency: int,
    no_progress: bool,
    **shop: Any,
) -> None:
    """Crawl the demo shop (started in-process) into an SQLite file and check the result.

    Kill it (Ctrl-C, or kill -9) and run it again: it resumes where it was.
    """
    path = _demo_path(db_path)
    with _only_demo(path):
        _demo(path, port, fresh, concurrency, no_progress, shop)


def _demo_path(db_path: str) -> Path:
    """The demo's database file for ``--db``, or a ConfigError saying why there can be
    none (before anything is created: the lock's folder would be the first thing)."""
    path = Path(db_path)
    if not db_path.strip() or db_path.endswith("/") or path.name in ("", ".", ".."):
        raise ConfigError(f"--db {db_path!r}: give a file, e.g. --db crashsafe-demo.db")
    if "?" in db_path or "#" in db_path:
        raise ConfigError(f"--db {db_path!r}: a file name with '?' or '#' reads as a URL's "
                          "query or fragment; choose another name")  # fmt: skip
    if path.is_symlink():  # the file it names: its locks, its crawls, its deletion
        path = path.resolve()
    if path.exists() and not path.is_file():
        raise ConfigError(f"--db {db_path}: not a file (a device?): give a file")
    if not path.parent.is_dir():
        why = "is not a folder" if path.parent.exists() else "does not exist"
        raise ConfigError(f"cannot create {path}: {path.parent} {why}")
    return path


def _demo(
    path: Path,
    port: int | None,
    fresh: bool,
    concurrency: int,
    no_progress: bool,
    shop: dict[str, Any],
) -> None:
    from crashsafe.crawl.engine import Crawler
    from crashsafe.demo.shop import ShopOptions
    from crashsafe.demo.spider import DemoShop
    from crashsafe.store import open_store

    crawled_from = None if fresh else _demo_port(path)
    if port is None:
        port = crawled_from or 0
    elif crawled_from is not None and port != crawled_from:
        raise ConfigError(
            f"{path} was crawled from the demo shop on port {crawled_from}, and its URLs "
            f"point there: run without --port (or with --port {crawled_from}) to resume it, "
            "or with --fresh to start over"
        )
    options = ShopOptions(**shop)
    with _shop_thread(options, port, resuming=crawled_from is not None) as site:
        if fresh:  # (once the shop is up: a port in use must not cost the database)
            _delete_database(path)
        again = " (resuming: the shop on the port it was crawled from)" if crawled_from else ""
        click.echo(f"demo shop at {site.url}/list/0; crawling into {path}{again}", err=True)
        store = open_store(f"sqlite:///{path}")
        try:
            spider = DemoShop()
            crawler = Crawler(
                spider,
                store,
                settings=spider.crawl_settings(concurrency=concurrency),
                start_urls=[f"{site.url}/list/0"],
                progress=not no_progress and sys.stderr.isatty(),
            )
            result = aio.run(crawler.run())
            records = {r.key: r.data for r in store.iter_records(spider.name)}
        finally:
            store.close()
        with urllib.request.urlopen(f"{site.url}/catalogue", timeout=10) as resp:
            catalogue = json.load(resp)
        server = site.shop.snapshot()
    if result.interrupted:
        report_result(result, f"sqlite:///{path}")
    wrong = sum(
        1
        for k, p in catalogue.items()
        if k in records and records[k] != {"name": p["name"], "price": p["price"]}
    )
    missing = len(set(catalogue) - set(records))
    click.echo(summary(result))
    click.echo(
        f"records: {len(records)} stored for {len(catalogue)} products, {wrong} wrong, "
        f"{missing} missing"
    )
    click.echo(
        f"this run: the shop counted {server['requests']} page requests "
        f"({server['repeated']} repeated) in {fmt_seconds(result.elapsed)}"
    )
    click.echo(f"inspect: {program()} status --db sqlite:///{path}")
    if wrong or missing:
        sys.exit(1)
