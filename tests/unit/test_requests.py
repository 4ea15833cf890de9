"""Durable requests: what a Request is keyed by, and what the frontier keeps of it."""

from __future__ import annotations

import pytest

from crashsafe import Request
from crashsafe.crawl.allow import LinkFilter
from crashsafe.crawl.requests import frontier_key, request_from_row
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError

URL = "http://shop.test/search"


def test_a_plain_get_is_keyed_by_its_canonical_url_and_stores_nothing_else() -> None:
    request = Request(URL)
    assert frontier_key(URL, request) == URL
    assert request.stored() is None


def test_method_and_body_make_the_key_headers_and_meta_do_not() -> None:
    a = Request(URL, method="POST", body='{"page": 1}')
    b = Request(URL, method="post", body=b'{"page": 1}', headers={"X": "1"}, meta={"m": 1})
    c = Request(URL, method="POST", body='{"page": 2}')
    assert frontier_key(URL, a) == frontier_key(URL, b)
    assert frontier_key(URL, a) != frontier_key(URL, c)
    assert frontier_key(URL, a).startswith(URL + "#POST:")
    assert frontier_key(URL, Request(URL, method="HEAD")) == URL + "#HEAD"
    # A GET with a body is not the plain GET of the URL either.
    assert frontier_key(URL, Request(URL, body="x")) != URL


def test_dont_filter_is_keyed_by_the_page_that_yields_it_and_its_place() -> None:
    request = Request(URL, dont_filter=True)
    first = frontier_key(URL, request, parent="http://shop.test/a", ordinal=1)
    assert first == frontier_key(URL, request, parent="http://shop.test/a", ordinal=1)
    assert first != frontier_key(URL, request, parent="http://shop.test/a", ordinal=2)
    assert first != frontier_key(URL, request, parent="http://shop.test/b", ordinal=1)
    assert first != URL


def test_what_is_stored_brings_the_same_request_back() -> None:
    request = Request(
        URL,
        method="POST",
        headers={"Content-Type": "application/json"},
        body=b"\xff\x00binary",
        cookies={"session": "s1"},
        callback="parse_item",
        cb_kwargs={"n": 2},
        meta={"category": "tools", "path": ["a", "b"]},
    )
    key = frontier_key(URL, request)
    back = request_from_row(key, "parse_item", request.stored())
    assert back.url == URL and back.key == key
    assert back.method == "POST"
    assert back.body_bytes == b"\xff\x00binary"
    assert back.headers == {"Content-Type": "application/json"}
    assert back.cookies == {"session": "s1"}
    assert back.cb_kwargs == {"n": 2}
    assert back.meta == {"category": "tools", "path": ["a", "b"]}
    text = request_from_row(key, None, Request(URL, method="POST", body="é").stored())
    assert text.body_bytes == "é".encode()


def test_meta_that_is_not_json_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="meta must hold JSON"):
        Request(URL, meta={"when": object()}).stored()
    with pytest.raises(ConfigError, match="cb_kwargs must hold JSON"):
        Request(URL, cb_kwargs={"x": float("nan")}).stored()


def test_the_link_filter_keys_canonical_urls() -> None:
    links = LinkFilter(CrawlSettings(), ["http://shop.test/"])
    new = links.new_url(Request("http://SHOP.test/search?b=2&a=1&utm_source=x", method="POST"), 1)
    assert new is not None
    assert new.url == "http://shop.test/search?a=1&b=2#POST"
    assert new.request == '{"method":"POST"}'
    assert links.new_url(Request("http://elsewhere.test/"), 1) is None
