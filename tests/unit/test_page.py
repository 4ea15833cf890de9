"""Page: the fast paths (link joining, parsing HTML from its bytes) agree with the slow
ones they stand in for."""

from __future__ import annotations

from urllib.parse import urljoin

from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from crashsafe.crawl.spider import Page

HTML_UTF8 = "text/html; charset=utf-8"


def page(body: bytes, url: str = "http://shop.test/a/b?x=1", content_type: str = HTML_UTF8) -> Page:
    headers = CIMultiDictProxy(CIMultiDict({"Content-Type": content_type}))
    return Page(url=url, status=200, headers=headers, body=body)


bases = st.sampled_from(
    [
        "http://shop.test/a/b?x=1",
        "https://shop.test:8443/dir/",
        "http://shop.test",
        "http://user@shop.test/a#frag",
        "http://SHOP.test/a/b.html",
    ]
)
hrefs = st.one_of(
    st.text(alphabet="/ab.?#=%&;:\\ \tü", max_size=12),
    st.sampled_from(["/p", "/p/../q", "/./x", "//other.test/x", " /p ", "/p?q=1#f", "/ü"]),
)


@given(bases, hrefs)
def test_urljoin_agrees_with_the_standard_library(base: str, href: str) -> None:
    p = page(b"<html></html>", url=base)
    assert p.urljoin(href) == urljoin(p.base_url, href.strip())


@given(bases, hrefs)
def test_a_joined_url_joins_to_itself(base: str, href: str) -> None:
    # A Request of page.follow is joined again when it is stored: from the page's cache.
    p = page(b"<html></html>", url=base)
    once = p.urljoin(href)
    assert p.urljoin(once) == once == urljoin(p.base_url, once)


def test_urljoin_honours_the_base_element() -> None:
    p = page(b'<html><head><base href="http://cdn.test/x/"></head></html>')
    assert p.urljoin("/img.png") == "http://cdn.test/img.png"
    assert p.urljoin("img.png") == "http://cdn.test/x/img.png"


def test_html_parsed_from_bytes_reads_like_parsel_from_text() -> None:
    body = "<html><body><p class='a'>Grüße\x00 &amp; co</p><a href='/x'>x</a></body></html>"
    fast = page(body.encode())
    slow = page(body.encode(), content_type="text/html")  # no charset: parsel's own path
    for p in (fast, slow):
        assert p.css("p.a::text").get() == "Grüße & co"
        assert p.css("a::attr(href)").getall() == ["/x"]
        assert p.selector.type == "html"
    assert fast._utf8 and not slow._utf8


def test_pages_that_are_not_utf8_html_take_parsel_s_path() -> None:
    latin = page("<p>café</p>".encode("latin-1"), content_type="text/html; charset=latin-1")
    assert latin.css("p::text").get() == "café"
    broken = page(b"<p>caf\xe9</p>")  # says UTF-8, is not: decoded leniently, still parsed
    assert broken.css("p::text").get() == "caf\ufffd"
    assert page(b"   ").css("p").getall() == []
    feed = page(b"<rss><item><title>t</title></item></rss>", content_type="application/rss+xml")
    assert feed.selector.type == "xml" and feed.xpath("//title/text()").get() == "t"
    data = page(b'{"a": [1, 2]}', content_type="application/json")
    assert data.json() == {"a": [1, 2]} and data.selector.type == "json"
