"""The values that cross to the store process survive pickling whole; a record's JSON
and hash; the origin of a URL."""

from __future__ import annotations

import collections
import hashlib
import json
import pickle
from urllib.parse import urlsplit

import pytest

from crashsafe.crawl.politeness import origin_of
from crashsafe.store import Lease, NewUrl, PageOutcome
from crashsafe.store.values import RecordRow


def test_store_values_pickle_to_equal_values() -> None:
    lease = Lease(frontier_id=7, url="http://a/x", depth=2, attempts=1, callback="item", grant_id=9)
    row = RecordRow.build(id="i", source="s", key="k", url="http://a/x", data={"p": [1, "é"]})
    outcome = PageOutcome(
        lease, "retry", 503, "HTTP 503", (row,), (NewUrl("http://a/y", 3, "cb", 1),), 12.5
    )
    for value in (lease, row, outcome, NewUrl("http://a/z")):
        copy = pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        assert copy == value and type(copy) is type(value)


def moved() -> collections.OrderedDict[str, int]:
    ordered = collections.OrderedDict(a=1, b=2)
    ordered.move_to_end("a")
    return ordered


@pytest.mark.parametrize(
    "data",
    [
        {"b": 1, "a": [1.5, 1e16, 1e-05, -0.0, None, True], "c": {"z": "é", "y": "\x00"}},
        {2: "integer keys", 1: "x"},  # json writes them as text; orjson refuses: json's path
        {"big": 2**70},  # beyond 64 bits: json's path
        {"odd": "\udc80"},  # a lone surrogate: json's path, with the exact form kept
        {"sub": collections.OrderedDict(b=1, a=2)},
        {"moved": moved()},  # an OrderedDict whose order is not its dict's: json's path
    ],
)
def test_a_records_text_reads_back_as_its_data_in_its_own_order(data: dict) -> None:
    row = RecordRow.build(id="i", source="s", key="k", url=None, data=data)
    as_json = json.loads(json.dumps(data))  # what JSON can say of it (keys become text)
    back = json.loads(row.data_json)
    assert back == as_json and list(back) == list(as_json)
    if row.data_exact is None:  # (data with surrogates is hashed in its tagged form)
        canonical = json.dumps(
            data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        assert row.content_hash == hashlib.sha256(canonical.encode()).hexdigest()


def test_a_records_hash_ignores_the_order_of_its_fields() -> None:
    one = RecordRow.build(id="i", source="s", key="k", url=None, data={"a": 1, "b": [2.5]})
    two = RecordRow.build(id="i", source="s", key="k", url=None, data={"b": [2.5], "a": 1})
    assert one.content_hash == two.content_hash and one.data_json != two.data_json


@pytest.mark.parametrize(
    "url",
    ["http://a.test", "https://a.test:8080/x?y#z", "http://a.test?x", "HTTP://A.test/x",
     "http://[::1]:80/a", "http://a\tb.test/x", " http://a.test/x", "http://u:p@a.test/x",
     "http:///x", "http://a.test;p/x", "ftp://a/b", "http:a/b", "http://a\uff03b/x"],
)  # fmt: skip
def test_origin_of_reads_a_url_as_urlsplit_does(url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # (a host NFKC would change)
        with pytest.raises(ValueError, match=str(exc)[:20]):
            origin_of(url)
    else:
        assert origin_of(url) == f"{parts.scheme}://{parts.netloc}"
