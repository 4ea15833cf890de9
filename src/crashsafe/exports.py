"""Records written out as JSON Lines, a JSON array or CSV: the one writer that
``crashsafe export``, ``crawl -o`` and the Scrapy adapter's feeds share.

A line (a row) is the item as the spider yielded it: its fields, in its order, its own
``id``, ``url`` or ``version`` included; a ``Record``'s data with its key beside it as
``_crashsafe_key``. crashsafe's other metadata (record id, url, version, times) is added
only when asked (``with_meta``; a change feed always has it), under names that start
with ``_crashsafe_``, so it never takes the place of a field of the item (an item that
has such a field itself is refused, not overwritten).

Text is written exactly: JSON carries NUL and lone surrogates as ``\\u`` escapes, so a
key or a value read back is the one yielded, but for one case JSON cannot tell apart: a
high and a low surrogate side by side (a "split pair") read back as the one character
they make; such rows are counted (``Written.joined``) and the command says so (the store
keeps them exactly). CSV in UTF-8 cannot carry a lone surrogate: such a cell is written
with a backslash escape and counted (``Written.escaped``), and the command says so.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from crashsafe.errors import ConfigError
from crashsafe.store.values import META_PREFIX, StoredRecord
from crashsafe.text import csv_cell

__all__ = ["FORMATS", "META_PREFIX", "Written", "format_of", "item_rows", "write_rows"]

#: The formats, by the file extensions that choose them.
FORMATS = {".jsonl": "jsonl", ".jl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}


def format_of(path: str, given: str | None = None) -> str:
    """The format ``given``, else the one ``path``'s extension names (raises ConfigError
    for an extension that names none)."""
    if given is not None:
        return given
    for ext, fmt in FORMATS.items():
        if path.lower().endswith(ext):
            return fmt
    known = ", ".join(FORMATS)
    raise ConfigError(f"{path}: the format comes from the extension ({known}), or give --format")


@dataclass(slots=True)
class Written:
    """What a write wrote: ``rows``, and CSV cells whose text had to be escaped."""

    rows: int = 0
    escaped: int = 0
    joined: int = 0  # rows whose text held a split surrogate pair (JSON reads one character)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def item_row(r: StoredRecord, *, with_meta: bool = False, feed: bool = False) -> Any:
    """What is written of record ``r``: a plain item as it was yielded; a ``Record``'s
    data with its key beside it (``_crashsafe_key``: the key is part of what was yielded).
    With ``with_meta`` (or in a change feed, ``feed``) crashsafe's other ``_crashsafe_*``
    fields are added. Data that is not a dict goes under ``_crashsafe_data``."""
    if r.is_item and not (with_meta or feed):
        return r.data
    row = dict(r.data) if isinstance(r.data, dict) else {f"{META_PREFIX}data": r.data}
    meta: dict[str, Any] = {"key": r.key}
    if with_meta or feed:
        meta = {
            "id": r.id,
            "crawl": r.crawl,
            "source": r.source,
            "key": r.key,
            "url": r.url,
            "version": r.version,
            "first_seen": _iso(r.first_seen),
            "last_changed": _iso(r.last_changed),
        }
    if feed:
        meta["gone_at"] = None if r.gone_at is None else _iso(r.gone_at)
    for name, value in meta.items():
        column = META_PREFIX + name
        if column in row:
            raise ConfigError(
                f"record {r.key!r} has a field {column!r} of its own, which crashsafe's "
                "metadata would replace: export it without --with-meta"
            )
        row[column] = value
    return row


def item_rows(
    records: Iterable[StoredRecord], *, with_meta: bool = False, feed: bool = False
) -> Iterable[Any]:
    return (item_row(r, with_meta=with_meta, feed=feed) for r in records)


def json_text(value: Any, written: Written | None = None) -> str:
    """``value`` as JSON that a UTF-8 file holds exactly: UTF-8 text where it can be,
    ``\\u`` escapes where UTF-8 has no bytes (lone surrogates; a split pair among them
    is counted in ``written.joined``)."""
    text = json.dumps(value, ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            if written is not None and _SPLIT_PAIR.search(text):
                written.joined += 1
            return json.dumps(value)
    return text


_SPLIT_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _write_jsonl(rows: Iterable[Any], out: IO[str]) -> Written:
    w = Written()
    for row in rows:
        out.write(json_text(row, w) + "\n")
        w.rows += 1
    return w


def _write_json(rows: Iterable[Any], out: IO[str]) -> Written:
    w = Written()
    out.write("[")
    for row in rows:
        out.write(("\n" if w.rows == 0 else ",\n") + json_text(row, w))
        w.rows += 1
    out.write("\n]\n")
    return w


def _write_csv(rows: Iterable[Any], out: IO[str], *, raw: bool) -> Written:
    """One pass over ``rows``, spooled to a temporary file while the union of their
    fields (in the order first met) is gathered for the header, then the rows: the
    header and the rows are of the same reading (two readings of a database a crawl is
    writing could differ), and nothing is held in memory."""
    import tempfile

    fields: dict[str, None] = {}
    with tempfile.TemporaryFile("w+", encoding="ascii") as spool:
        for row in rows:
            fields.update(dict.fromkeys(row if isinstance(row, dict) else ["data"]))
            spool.write(json.dumps(row) + "\n")  # (ASCII: every string escaped)
        spool.seek(0)
        return _write_spooled(spool, list(fields), out, raw=raw)


def _write_spooled(spool: IO[str], fields: list[str], out: IO[str], *, raw: bool) -> Written:
    writer = csv.writer(out)
    written = Written()
    written.escaped += _write_cells(writer, fields, raw=raw)
    for line in spool:
        row = json.loads(line)
        data = row if isinstance(row, dict) else {"data": row}
        cells = [data.get(f) for f in fields]
        cells = [json_text(c) if isinstance(c, dict | list) else c for c in cells]
        written.escaped += _write_cells(writer, cells, raw=raw)
        written.rows += 1
    return written


def _write_cells(writer: Any, cells: list[Any], *, raw: bool) -> int:
    escaped = 0
    out = []
    for c in cells:
        if isinstance(c, str) and not c.isascii():
            try:
                c.encode()
            except UnicodeEncodeError:
                c = c.encode("utf-8", "backslashreplace").decode()
                escaped += 1
        out.append(c if raw else csv_cell(c))
    writer.writerow(out)
    return escaped


def write_rows(
    rows: Callable[[], Iterable[Any]], out: IO[str], fmt: str, *, raw: bool = False
) -> Written:
    """Write the rows ``rows()`` gives as ``fmt`` to ``out``, reading them once. CSV
    cells a spreadsheet would run as a formula are neutralised unless ``raw``."""
    if fmt == "csv":
        return _write_csv(rows(), out, raw=raw)
    if fmt == "json":
        return _write_json(rows(), out)
    return _write_jsonl(rows(), out)
