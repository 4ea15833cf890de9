"""export, and crawl's -o: stored records written whole, to stdout or a file replaced
whole by a rename (crashsafe/exports.py writes them)."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from crashsafe.cli.common import crawl_names, one_crawl, parse_duration
from crashsafe.cli.options import db_option, open_db
from crashsafe.durations import seconds
from crashsafe.errors import ConfigError, CrashsafeError
from crashsafe.exports import Written, format_of, item_rows, write_rows
from crashsafe.files import atomic_text
from crashsafe.store import Store

F = TypeVar("F", bound=Callable[..., Any])


def parse_since(
    text: str | None, store: Store | None = None, crawl: str | None = None
) -> float | None:
    """``--since``: an ISO time, a duration back from now (``1h``, ``2d``), or
    ``last-pass`` (when the crawl's last recrawl began); None without it (the live
    records, not a change feed)."""
    if not text:
        return None
    if text == "last-pass" and store is not None:
        name = one_crawl(store, crawl)
        start = store.last_pass_at(name)
        if start is None:
            raise ConfigError(
                f"--since last-pass: {name} has had no recrawl yet (`crashsafe recrawl`)"
            )
        return float(start)
    if seconds(text) is not None:
        return time.time() - parse_duration(text, "--since")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: use an ISO time like 2026-11-30T08:00:00Z, a duration back "
            "from now like 1h or 2d, or last-pass"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


@contextlib.contextmanager
def open_output(path: str | None) -> Iterator[IO[str]]:
    if path is None:
        yield sys.stdout
        return
    try:
        with atomic_text(Path(path)) as out:
            yield out
    except OSError as exc:
        raise _output_error(Path(path), exc) from None


def _output_error(path: Path, exc: OSError) -> CrashsafeError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "disk full: free some space and run the same command again"
    elif exc.errno == errno.ENOENT and not path.parent.is_dir():
        why = f"the folder {path.parent} does not exist: create it, or choose another path"
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        why = f"{exc.strerror}: the folder {path.parent} cannot be written; choose another path"
    else:
        why = f"{exc.strerror or exc}: check the path and its folder"
    kept = f" ({path} is as it was)" if path.exists() else ""
    return CrashsafeError(f"cannot write {path}: {why}{kept}")


def write_records(
    store: Store,
    crawls: Iterable[str],
    out: IO[str],
    fmt: str,
    *,
    since: float | None = None,
    changed_only: bool = False,
    with_meta: bool = False,
    raw: bool = False,
) -> Written:
    """The records of ``crawls`` as ``fmt`` to ``out`` (a change feed with ``since``)."""
    names = list(crawls)

    def rows() -> Iterator[Any]:
        for name in names:
            records = store.iter_records(name, since=since, changed_only=changed_only)
            yield from item_rows(records, with_meta=with_meta, feed=since is not None)

    return write_rows(rows, out, fmt, raw=raw)


def said(written: Written, where: str) -> str:
    """``wrote 500 record(s) to x.csv`` (and the cells CSV could not hold exactly)."""
    line = f"wrote {written.rows} record(s) to {where}"
    if written.escaped:
        line += (
            f"; {written.escaped} CSV cell(s) held lone surrogates, which UTF-8 cannot carry: "
            "written as \\u escapes (export as JSON Lines for the exact text)"
        )
    if written.joined:
        line += (
            f"; {written.joined} record(s) held a high and a low surrogate side by side, "
            "which a JSON reader reads as the one character they make (the store keeps "
            "them apart: Store.iter_records)"
        )
    return line


@dataclass(frozen=True, slots=True)
class Feed:
    """``crawl -o FILE`` (or ``-O FILE``, as Scrapy spells the same): the crawl's items
    written once it is complete, from the store (which stays the truth), to a file
    replaced whole by a rename. Run again, the command writes it again, whole."""

    path: Path
    fmt: str

    @classmethod
    def from_options(cls, output: str | None, overwrite: str | None) -> Feed | None:
        if output is not None and overwrite is not None:
            raise ConfigError("give -o FILE or -O FILE, not both")
        target = output if output is not None else overwrite
        if target is None:
            return None
        if not target.strip():
            raise ConfigError("-o/-O: give a file name")
        feed = cls(Path(target), format_of(target))
        feed.check()
        return feed

    def check(self) -> None:
        """Refuse, before any work, a file -o could not write."""
        folder = self.path.parent
        if not folder.is_dir():
            raise ConfigError(f"cannot write {self.path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise ConfigError(
                f"cannot write {self.path}: the folder {folder} cannot be written (a "
                "read-only file system, or no permission); choose another -o"
            )
        if self.path.is_dir():
            raise ConfigError(f"cannot write {self.path}: it is a folder; give a file name")

    def write(self, db_url: str, crawl: str, *, waiting: bool = False) -> int:
        """Write the file; ``waiting``: the crawl stopped with pages waiting for origins
        that cannot be reached, which is said (the file holds every other item: a cron
        line with one site down still gets the rest)."""
        self.check()
        store = open_db(db_url, readonly=True)
        try:
            with open_output(str(self.path)) as out:
                written = write_records(store, [crawl], out, self.fmt)
        finally:
            store.close()
        line = said(written, str(self.path))
        if waiting:
            line += " (not the items of the pages that wait, below: the crawl is not complete)"
        click.echo(line, err=True)
        return written.rows


def output_options(f: F) -> F:
    """``--format`` and ``-o``: what `export` and `history` write, and where."""
    f = click.option(
        "-o", "--output", type=click.Path(dir_okay=False), help="File (default stdout)."
    )(f)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["jsonl", "json", "csv"]),
        help="Default: from the extension of -o (.jsonl, .json, .csv), else jsonl.",
    )(f)


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Only this crawl.")
@output_options
@click.option(
    "--since",
    help="A change feed: records created, changed or gone at or after this time (ISO, or "
    "a duration back from now: 1h, 2d), or since the last recrawl began (last-pass); "
    "it has crashsafe's metadata, _crashsafe_gone_at for gone ones.",
)
@click.option(
    "--changed-only",
    is_flag=True,
    help="With --since: only records that existed before it (updated or gone, not new).",
)
@click.option(
    "--with-meta",
    is_flag=True,
    help="Add crashsafe's metadata to each item: _crashsafe_id, _crashsafe_crawl, "
    "_crashsafe_source, _crashsafe_key, _crashsafe_url, _crashsafe_version, "
    "_crashsafe_first_seen, _crashsafe_last_changed.",
)
@click.option(
    "--csv-raw",
    is_flag=True,
    help="CSV: keep cells that start with = + - @ as they are (a spreadsheet may run them).",
)
def export(
    db_url: str,
    crawl_name: str | None,
    fmt: str | None,
    output: str | None,
    since: str | None,
    changed_only: bool,
    with_meta: bool,
    csv_raw: bool,
) -> None:
    """Write the stored items as JSON Lines, a JSON array or CSV: each item as the spider
    yielded it, its fields in its order.

    CSV cells that start with = + - @ (a formula to a spreadsheet) get a leading ' unless
    --csv-raw is given.
    """
    if changed_only and not since:
        raise ConfigError("--changed-only needs --since (a time, or last-pass)")
    fmt = fmt or (format_of(output) if output else "jsonl")
    store = open_db(db_url, readonly=True)
    try:
        names = crawl_names(store, crawl_name)
        since_ts = parse_since(since, store, crawl_name)
        with open_output(output) as out:
            written = write_records(
                store, names, out, fmt, since=since_ts, changed_only=changed_only,
                with_meta=with_meta, raw=csv_raw,
            )  # fmt: skip
    finally:
        store.close()
    if output or written.escaped or written.joined:
        click.echo(said(written, output or "stdout"), err=True)
