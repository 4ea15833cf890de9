"""LinkFilter: which links enter the frontier, and in which form (cached or not)."""

from __future__ import annotations

import re

import pytest

from crashsafe.crawl import allow
from crashsafe.crawl.allow import BadLink, LinkFilter
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.ids import canonical_url

CASES = {
    "http://A.example.com:80/x?utm_source=n&b=2&a=1#top": "http://a.example.com/x?a=1&b=2",
    "https://example.com/p/1": "https://example.com/p/1",
    "http://elsewhere.org/p": None,  # not an allowed domain
}
BAD = {
    "mailto:shop@example.com": "unsupported scheme 'mailto'",
    "ftp://example.com/file": "unsupported scheme 'ftp'",
    "http://[::1": "Invalid IPv6 URL",
    "http://example.com:99999/x": "Port out of range",
    "http://example.com:80a/x": "Port could not be cast",
    "http:///x": "no host",
    "http://example.com/\udc80": "surrogates not allowed",
}


def test_canonical_links_and_refusals_are_the_same_from_the_cache() -> None:
    links = LinkFilter(CrawlSettings(allowed_domains=("*.example.com",)), [])
    for _ in range(3):
        assert {url: links.canonical(url) for url in CASES} == CASES
        for url, reason in BAD.items():
            with pytest.raises(BadLink, match=re.escape(reason)):
                links.canonical(url)


def test_the_cache_is_bounded_and_stays_right(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allow, "CANONICAL_CACHE", 10)
    links = LinkFilter(CrawlSettings(), ["https://example.com/"])
    urls = [f"https://example.com/p/{n}?utm_medium=x&z=1" for n in range(35)]
    for url in urls * 2:
        assert links.canonical(url) == canonical_url(url)
        assert len(links._canonical) <= 10


def test_links_beyond_the_cap_are_cut_and_counted_apart_from_malformed_ones() -> None:
    from crashsafe.crawl.extract import to_rows
    from crashsafe.crawl.spider import Page

    page = Page(url="http://a.example/", status=200, headers={}, body=b"")
    f = LinkFilter(CrawlSettings(), ["http://a.example/"])
    hrefs = [f"/p/{n}" for n in range(25)]
    rows = to_rows(["http://[::1", *hrefs], page=page, source="s", links=f, max_links=11)
    assert [u.url for u in rows.links] == [f"http://a.example/p/{n}" for n in range(10)]
    # (#22 item 6: a page cut by max_links_per_page reported its links as malformed)
    assert (rows.links_skipped, rows.links_cut) == (1, 15)
    assert len(rows.skipped) == 1 and "[::1" in rows.skipped[0]


def test_links_outside_the_allow_list_are_counted_per_page_not_too_deep_ones() -> None:
    from crashsafe.crawl.extract import to_rows
    from crashsafe.crawl.spider import Page

    f = LinkFilter(CrawlSettings(max_depth=1), ["http://a.example/"])
    outside = ["http://b.example/x", "http://a.example:8080/", "https://b.example/x"]
    first = Page(url="http://a.example/", status=200, headers={}, body=b"")
    rows = to_rows([*outside, "/in", outside[0]], page=first, source="s", links=f)
    assert [u.url for u in rows.links] == ["http://a.example/in"]
    assert rows.links_offsite == 4  # (the same link twice is twice: links are counted)
    again = to_rows(outside, page=first, source="s", links=f)  # the cache answers: counted
    assert again.links_offsite == 3
    deep = Page(url="http://a.example/in", status=200, headers={}, body=b"", depth=1)
    too_deep = to_rows(["/deeper", outside[0]], page=deep, source="s", links=f)
    assert too_deep.links == [] and too_deep.links_offsite == 0
