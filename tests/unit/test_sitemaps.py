"""Sitemaps: urlsets, indexes, gzip and text files are read; bombs, XXE and pages that are
not sitemaps are refused without using unbounded memory."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from crashsafe.crawl.sitemaps import (
    Sitemap,
    SitemapEntry,
    SitemapError,
    lastmod_time,
    read_sitemap,
    sitemaps_in_robots,
)
from crashsafe.errors import CrashsafeError

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'

URLSET = f"""<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS} xmlns:image="http://www.google.com/schemas/sitemap-image/1.1">
  <url>
    <image:image><image:loc>https://shop.test/img/1.png</image:loc></image:image>
    <loc> https://shop.test/p/1 </loc>
    <lastmod>2024-05-01</lastmod>
    <changefreq>daily</changefreq>
  </url>
  <url><loc>https://shop.test/p/2?a=1&amp;b=2</loc></url>
</urlset>
""".encode()

URLSET_ENTRIES = [
    SitemapEntry("https://shop.test/p/1", "2024-05-01", changefreq="daily"),
    SitemapEntry("https://shop.test/p/2?a=1&b=2", None),
]


def urlset(*locs: str) -> bytes:
    urls = "".join(f"<url><loc>{loc}</loc></url>" for loc in locs)
    return f"<urlset {NS}>{urls}</urlset>".encode()


def test_urlset_with_lastmod() -> None:
    # the page's <loc>, not the nested <image:loc> written before it
    assert read_sitemap(URLSET) == Sitemap("urlset", URLSET_ENTRIES, truncated=False)


def test_sitemap_index() -> None:
    body = f"""<sitemapindex {NS}>
      <sitemap><loc>https://shop.test/s1.xml.gz</loc>
        <lastmod>2024-05-01T10:00:00+02:00</lastmod></sitemap>
      <sitemap><loc>https://shop.test/s2.xml</loc></sitemap>
    </sitemapindex>""".encode()
    assert read_sitemap(body) == Sitemap(
        "sitemapindex",
        [
            SitemapEntry("https://shop.test/s1.xml.gz", "2024-05-01T10:00:00+02:00"),
            SitemapEntry("https://shop.test/s2.xml", None),
        ],
        truncated=False,
    )


def test_gzip_is_told_by_its_magic_bytes() -> None:
    assert read_sitemap(gzip.compress(URLSET)).entries == URLSET_ENTRIES
    # several gzip members one after another, then zero padding, form one file
    half = len(URLSET) // 2
    members = gzip.compress(URLSET[:half]) + gzip.compress(URLSET[half:]) + b"\0" * 8
    assert read_sitemap(members).entries == URLSET_ENTRIES


def gzip_of_zeros(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(bytes(2**20)) for _ in range(megabytes)]
    return b"".join([*parts, packer.flush()])


@pytest.mark.timeout(60)
def test_gzip_bomb_is_refused_without_inflating_it() -> None:
    bomb = gzip_of_zeros(200)
    assert len(bomb) < 1_000_000  # 200 MB once inflated
    tracemalloc.start()
    try:
        with pytest.raises(SitemapError, match="larger than 1048576 bytes once decompressed"):
            read_sitemap(bomb, max_bytes=2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # memory, not time, shows the bomb was never inflated: a few MB, not 200
    assert peak < 8 * 2**20


def test_oversize_plain_body_is_refused() -> None:
    body = urlset(*(f"https://shop.test/p/{n}" for n in range(100)))
    with pytest.raises(SitemapError, match=f"larger than {len(body) - 1} bytes"):
        read_sitemap(body, max_bytes=len(body) - 1)
    assert len(read_sitemap(body, max_bytes=len(body)).entries) == 100


@pytest.mark.timeout(30)  # a missed end of stream would loop forever
def test_truncated_or_corrupt_gzip_is_refused() -> None:
    packed = gzip.compress(URLSET)
    for cut in (packed[:-4], packed[: len(packed) // 2], packed[:2]):
        with pytest.raises(SitemapError, match="gzip sitemap is truncated"):
            read_sitemap(cut)
    with pytest.raises(SitemapError, match="gzip sitemap is corrupt"):
        read_sitemap(b"\x1f\x8b" + b"not deflate at all" * 10)


@pytest.mark.parametrize(
    "doctype",
    [
        '<!DOCTYPE urlset [<!ENTITY e SYSTEM "{uri}">]>',
        '<!DOCTYPE urlset [<!ENTITY % p SYSTEM "{uri}"> %p; <!ENTITY e "x">]>',
        '<!DOCTYPE urlset SYSTEM "{uri}">',
    ],
)
def test_external_entities_are_not_resolved(tmp_path: Path, doctype: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    body = (
        '<?xml version="1.0"?>'
        + doctype.format(uri=secret.as_uri())
        + f"<urlset {NS}><url><loc>&e;</loc></url><url><loc>https://shop.test/&e;</loc></url>"
        + "<url><loc>https://shop.test/ok</loc></url></urlset>"
    ).encode()
    result = read_sitemap(body)
    assert "TOPSECRET" not in repr(result)
    # a <loc> holding an entity is not cut into a wrong URL such as "https://shop.test/"
    assert result.entries == [SitemapEntry("https://shop.test/ok", None)]


@pytest.mark.timeout(30)
def test_billion_laughs_is_refused() -> None:
    entities = "".join(f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10))
    body = (
        f'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY lol0 "lol">{entities}]>'
        f"<urlset {NS}><url><loc>https://shop.test/&lol9;</loc></url>"
        "<url><loc>https://shop.test/ok</loc></url></urlset>"
    ).encode()
    # Entities are never expanded; libxml2 also stops parsing at the amplification, so the
    # rest of the body may be lost, or the whole of it if that happens in the DOCTYPE.
    try:
        result = read_sitemap(body)
    except SitemapError as exc:
        assert "not a sitemap: no XML element" in str(exc)
    else:
        assert result.entries in ([], [SitemapEntry("https://shop.test/ok", None)])


@pytest.mark.parametrize("xmlns", ["", 'xmlns="http://example.test/not-the-sitemap-ns"'])
def test_any_namespace_or_none(xmlns: str) -> None:
    body = f"""<urlset {xmlns}><url><loc>https://shop.test/p/1</loc>
        <lastmod>2024-05</lastmod></url></urlset>""".encode()
    assert read_sitemap(body) == Sitemap(
        "urlset", [SitemapEntry("https://shop.test/p/1", "2024-05")], truncated=False
    )


def test_html_page_is_not_a_sitemap() -> None:
    body = b"<!DOCTYPE html>\n<html><body><a href='https://shop.test/'>x</a></body></html>"
    with pytest.raises(SitemapError, match=r"not a sitemap: root element <html>") as caught:
        read_sitemap(body)
    assert isinstance(caught.value, CrashsafeError)


def test_entries_without_loc_are_skipped() -> None:
    body = f"""<urlset {NS}>
      <url><lastmod>2024-01-01</lastmod></url>
      <url><loc></loc></url>
      <url><loc>   </loc></url>
      <url><loc>https://shop.test/kept</loc></url>
    </urlset>""".encode()
    assert read_sitemap(body).entries == [SitemapEntry("https://shop.test/kept", None)]


def test_broken_xml_yields_the_entries_before_the_break() -> None:
    whole = urlset("https://shop.test/p/1", "https://shop.test/p/2", "https://shop.test/p/3")
    cut = whole[: whole.index(b"/p/3") - 2]  # in the middle of the third <loc>
    assert [e.loc for e in read_sitemap(cut).entries] == [
        "https://shop.test/p/1",
        "https://shop.test/p/2",
    ]


def test_max_entries_truncates() -> None:
    body = urlset(*(f"https://shop.test/p/{n}" for n in range(5)))
    cut = read_sitemap(body, max_entries=3)
    assert [e.loc for e in cut.entries] == [f"https://shop.test/p/{n}" for n in range(3)]
    assert cut.truncated is True
    exact = read_sitemap(body, max_entries=5)
    assert (len(exact.entries), exact.truncated) == (5, False)


def test_text_sitemap() -> None:
    body = (
        "\ufeff\r\nhttps://shop.test/p/1\r\n\r\n  http://shop.test/p/2  \r\n"
        "# a comment\r\nftp://shop.test/file\r\nHTTPS://shop.test/p/3\r\n"
    ).encode()
    urls = ["https://shop.test/p/1", "http://shop.test/p/2", "HTTPS://shop.test/p/3"]
    expected = [SitemapEntry(url, None) for url in urls]
    assert read_sitemap(body) == Sitemap("urlset", expected, truncated=False)
    assert read_sitemap(gzip.compress(body)).entries == expected
    assert read_sitemap(body, max_entries=2) == Sitemap("urlset", expected[:2], truncated=True)


def test_alternates() -> None:
    body = f"""<urlset {NS} xmlns:xhtml="http://www.w3.org/1999/xhtml">
      <url>
        <loc>https://shop.test/en/p/1</loc>
        <xhtml:link rel="alternate" hreflang="de" href="https://shop.test/de/p/1"/>
        <xhtml:link rel="alternate" hreflang="fr" href=" https://shop.test/fr/p/1 "/>
        <xhtml:link rel="canonical" href="https://shop.test/other"/>
      </url>
    </urlset>""".encode()
    assert read_sitemap(body).entries == [
        SitemapEntry(
            "https://shop.test/en/p/1",
            None,
            ("https://shop.test/de/p/1", "https://shop.test/fr/p/1"),
        )
    ]


def utc(year: int, month: int, day: int, hour: int = 0) -> float:
    return datetime(year, month, day, hour, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01", utc(2024, 5, 1)),
        (" 2024-05-01\n", utc(2024, 5, 1)),
        ("2024-05-01T10:00:00+02:00", utc(2024, 5, 1, 8)),
        ("2024-05-01T10:00:00Z", utc(2024, 5, 1, 10)),
        ("2024-05-01T10:00Z", utc(2024, 5, 1, 10)),
        ("2024-05-01T10:00:00.5-01:00", utc(2024, 5, 1, 11) + 0.5),
        ("2024-05-01T10:00:00", utc(2024, 5, 1, 10)),
        ("2024-05", utc(2024, 5, 1)),
        ("2024", utc(2024, 1, 1)),
        (None, None),
        ("", None),
        ("yesterday", None),
        ("2024-13-01", None),
        ("2024-02-30", None),
        ("2024-00", None),
    ],
)
def test_lastmod_time(text: str | None, expected: float | None) -> None:
    assert lastmod_time(text) == expected


def test_sitemaps_in_robots() -> None:
    robots = (
        "User-agent: *\nDisallow: /cart\n"
        "Sitemap: https://shop.test/sitemap.xml\n"
        "sitemap: https://shop.test/news.xml.gz\n"
    )
    assert sitemaps_in_robots(robots) == [
        "https://shop.test/sitemap.xml",
        "https://shop.test/news.xml.gz",
    ]
    assert sitemaps_in_robots("User-agent: *\nDisallow:\n") == []
