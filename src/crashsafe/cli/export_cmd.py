"""export: stored records as JSON Lines or CSV, to stdout or a file replaced whole."""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import click

from crashsafe.cli.crawl_cmds import crawl_names, one_crawl
from crashsafe.cli.options import db_option, iso_time, open_db
from crashsafe.errors import ConfigError, CrashsafeError
from crashsafe.files import atomic_text
from crashsafe.store import Store, StoredRecord
from crashsafe.text import csv_cell


def parse_since(
    text: str | None, store: Store | None = None, crawl: str | None = None
) -> float | None:
    """``--since``: an ISO time, or ``last-pass`` (when the crawl's last recrawl began);
    None without it (the live records, not a change feed)."""
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
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"--since {text!r}: use an ISO time like 2026-11-30T08:00:00Z, or last-pass"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _record_dict(r: StoredRecord) -> dict[str, Any]:
    gone = {} if r.gone_at is None else {"gone_at": iso_time(r.gone_at)}
    return {
        "id": r.id,
        "crawl": r.crawl,
        "source": r.source,
        "key": r.key,
        "url": r.url,
        "version": r.version,
        "first_seen": iso_time(r.first_seen),
        "last_changed": iso_time(r.last_changed),
        **gone,
        "data": r.data,
    }


@contextlib.contextmanager
def _records(
    store: Store, crawl: str | None, since: float | None, changed_only: bool = False
) -> Iterator[Iterator[StoredRecord]]:
    """``store.iter_records``, its cursor closed on the way out (a write that fails half-way
    must not leave it to be closed after the store, with an error of its own)."""
    records = store.iter_records(crawl, since=since, changed_only=changed_only)
    try:
        yield records
    finally:
        close = getattr(records, "close", None)
        if close is not None:
            close()


def write_jsonl(records: Iterable[StoredRecord], out: IO[str]) -> int:
    n = 0
    for r in records:
        out.write(json.dumps(_record_dict(r), ensure_ascii=False) + "\n")
        n += 1
    return n


def _as_is(value: Any) -> Any:
    return value


def write_csv(
    store: Store,
    crawl: str | None,
    since: float | None,
    out: IO[str],
    *,
    raw: bool = False,
    changed_only: bool = False,
) -> int:
    """Records as CSV, one column per data key; cells a spreadsheet would run as formulas
    are neutralised (:func:`crashsafe.text.csv_cell`) unless ``raw``."""
    cell: Callable[[Any], Any] = _as_is if raw else csv_cell
    fields: dict[str, None] = {}
    with _records(store, crawl, since, changed_only) as records:  # the union of data keys
        for r in records:
            if isinstance(r.data, dict):
                fields.update(dict.fromkeys(r.data))
    head = ["id", "crawl", "source", "key", "url", "version", "first_seen", "last_changed"]
    if since is not None:  # a change feed: gone records are in it
        head.append("gone_at")
    writer = csv.writer(out)
    writer.writerow(head + [f for f in fields if f not in head])
    n = 0
    with _records(store, crawl, since, changed_only) as records:
        for r in records:
            row = {"gone_at": None, **_record_dict(r)}
            data = r.data if isinstance(r.data, dict) else {"data": r.data}
            cells = [row[h] for h in head]
            for f in fields:
                if f in head:
                    continue
                v = data.get(f)
                cells.append(json.dumps(v) if isinstance(v, dict | list) else v)
            writer.writerow([cell(c) for c in cells])
            n += 1
    return n


@contextlib.contextmanager
def _open_output(path: str | None) -> Iterator[IO[str]]:
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
    else:
        why = f"{exc.strerror or exc}: check the path and its folder"
    kept = f" ({path} is as it was)" if path.exists() else ""
    return CrashsafeError(f"cannot write {path}: {why}{kept}")


def write_json(records: Iterable[StoredRecord], out: IO[str]) -> int:
    """Records as one JSON array (a record per line inside it)."""
    n = 0
    out.write("[")
    for r in records:
        out.write(("\n" if n == 0 else ",\n") + json.dumps(_record_dict(r), ensure_ascii=False))
        n += 1
    out.write("\n]\n")
    return n


FEED_FORMATS = {".jsonl": "jsonl", ".jl": "jsonl", ".json": "json", ".csv": "csv"}


@dataclass(frozen=True, slots=True)
class Feed:
    """``crawl -o FILE`` / ``-O FILE``: the crawl's records written at its end, from the
    store (which stays the truth), to a file replaced whole by a rename."""

    path: Path
    fmt: str
    overwrite: bool

    @classmethod
    def from_options(cls, output: str | None, overwrite: str | None) -> Feed | None:
        if output is not None and overwrite is not None:
            raise ConfigError("give -o FILE or -O FILE, not both")
        target = output if output is not None else overwrite
        if target is None:
            return None
        if not target.strip():
            raise ConfigError("-o/-O: give a file name")
        path = Path(target)
        fmt = FEED_FORMATS.get(path.suffix.lower())
        if fmt is None:
            known = ", ".join(FEED_FORMATS)
            raise ConfigError(f"-o {target}: the format comes from the extension ({known})")
        feed = cls(path, fmt, overwrite=bool(overwrite))
        feed.check()
        return feed

    def check(self) -> None:
        """Refuse, before any work, a file -o would have to overwrite."""
        if self.path.exists() and not self.overwrite:
            raise ConfigError(
                f"{self.path} exists: -O {self.path} replaces it (the file holds every record "
                "of the crawl, so appending would repeat them)"
            )
        folder = self.path.parent
        if not folder.is_dir():
            raise ConfigError(f"cannot write {self.path}: the folder {folder} does not exist")

    def write(self, db_url: str, crawl: str) -> int:
        self.check()
        store = open_db(db_url, readonly=True)
        try:
            with _open_output(str(self.path)) as out:
                n = write_records(store, crawl, None, out, self.fmt)
        finally:
            store.close()
        click.echo(f"wrote {n} record(s) to {self.path}", err=True)
        return n


def write_records(
    store: Store,
    crawl: str | None,
    since: float | None,
    out: IO[str],
    fmt: str,
    *,
    raw: bool = False,
    changed_only: bool = False,
) -> int:
    if fmt == "csv":
        return write_csv(store, crawl, since, out, raw=raw, changed_only=changed_only)
    write = write_jsonl if fmt == "jsonl" else write_json
    with _records(store, crawl, since, changed_only) as records:
        return write(records, out)


@click.command()
@db_option()
@click.option("--crawl", "crawl_name", help="Only this crawl.")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "json", "csv"]), default="jsonl")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="File (default stdout).")
@click.option(
    "--since",
    help="A change feed: records created, changed or gone at or after this ISO time, or "
    "since the last recrawl began (last-pass); gone ones have gone_at.",
)
@click.option(
    "--changed-only",
    is_flag=True,
    help="With --since: only records that existed before it (updated or gone, not new).",
)
@click.option(
    "--csv-raw",
    is_flag=True,
    help="CSV: keep cells that start with = + - @ as they are (a spreadsheet may run them).",
)
def export(
    db_url: str,
    crawl_name: str | None,
    fmt: str,
    output: str | None,
    since: str | None,
    changed_only: bool,
    csv_raw: bool,
) -> None:
    """Write stored records as JSON Lines, a JSON array or CSV.

    CSV cells that start with = + - @ (a formula to a spreadsheet) get a leading ' unless
    --csv-raw is given.
    """
    if changed_only and not since:
        raise ConfigError("--changed-only needs --since (a time, or last-pass)")
    store = open_db(db_url, readonly=True)
    try:
        crawl_names(store, crawl_name)
        since_ts = parse_since(since, store, crawl_name)
        with _open_output(output) as out:
            n = write_records(
                store, crawl_name, since_ts, out, fmt, raw=csv_raw, changed_only=changed_only
            )
    finally:
        store.close()
    if output:
        click.echo(f"wrote {n} record(s) to {output}", err=True)
