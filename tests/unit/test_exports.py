"""crashsafe/exports.py: what an export writes of each record (#22 item 1, #23 item 4)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from crashsafe.crawl.extract import ParseError, _record_row
from crashsafe.exports import item_row, write_rows
from crashsafe.store import StoredRecord


def record(data: Any, *, is_item: bool = False, key: str = "k") -> StoredRecord:
    return StoredRecord("c", "i" * 32, "src", key, "http://a/", 2, 0.0, 1.0, data, None, is_item)


def test_a_csv_is_one_reading_of_the_records() -> None:
    # Two readings of a database a crawl writes can differ: the header came from one and
    # the rows from another, and fields first met in the second were dropped, silently.
    readings = iter([[{"a": 1}], [{"a": 2, "late": "x"}]])

    def rows() -> Iterator[Any]:
        return iter(next(readings))

    out = io.StringIO()
    write_rows(rows, out, "csv")
    assert list(csv.DictReader(io.StringIO(out.getvalue()))) == [{"a": "1"}]


def test_a_records_key_and_metadata_never_take_a_fields_place() -> None:
    assert item_row(record({"id": 1, "key": "mine"}, is_item=True)) == {"id": 1, "key": "mine"}
    assert item_row(record({"v": 1})) == {"v": 1, "_crashsafe_key": "k"}
    # data that is not an object is not confused with an object holding a "data" field
    assert item_row(record("text")) == {"_crashsafe_data": "text", "_crashsafe_key": "k"}
    assert item_row(record({"data": "text"})) == {"data": "text", "_crashsafe_key": "k"}
    meta = item_row(record({"v": 1}, is_item=True), with_meta=True)
    assert meta["_crashsafe_source"] == "src" and meta["_crashsafe_version"] == 2


def test_the_help_of_with_meta_names_every_field_it_adds() -> None:
    from crashsafe.cli.export_cmd import export

    [option] = [p for p in export.params if "--with-meta" in p.opts]
    added = set(item_row(record({"v": 1}, is_item=True), with_meta=True)) - {"v"}
    assert added == {name.strip(" .") for name in option.help.split(":")[1].split(",")}


def test_a_field_named_like_crashsafes_own_is_refused_at_the_yield() -> None:
    with pytest.raises(ParseError, match="has a field '_crashsafe_key'"):
        _record_row("k", {"_crashsafe_key": "x"}, "src", "http://a/")


def test_a_value_that_reads_like_crashsafes_field_name_is_kept() -> None:
    row = _record_row("k", {"note": '"_crashsafe_key" is a name', "_crashsafe": 1}, "s", "u")
    assert json.loads(row.data_json)["note"] == '"_crashsafe_key" is a name'


def test_json_cannot_tell_a_split_surrogate_pair_and_says_so() -> None:
    split, whole = "\ud83d\ude00", "\U0001f600"
    out = io.StringIO()
    written = write_rows(lambda: iter([{"v": split}, {"v": whole}, {"v": "\ud800"}]), out, "jsonl")
    assert written.joined == 1  # the split pair: a JSON reader reads the character
    assert [json.loads(x)["v"] for x in out.getvalue().splitlines()] == [whole, whole, "\ud800"]
