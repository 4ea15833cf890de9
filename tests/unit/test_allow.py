"""One allow decision, on the URL that will be fetched: every spelling that two URL parsers
read differently is refused, and the host checked is the host connected to."""

from __future__ import annotations

import logging
import time

import pytest

from crashsafe.crawl.allow import AllowList, BadLink, LinkFilter, client_url, parse_entry
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError

ALLOWED = ("allowed.example", "127.0.0.1:8001")


def links(*allowed: str) -> LinkFilter:
    return LinkFilter(CrawlSettings(allowed_domains=allowed or ALLOWED), [])


# (link, why it is refused): skipped and counted, never fetched, never failing its page
REFUSED = {
    # backslash: w3lib reads it as "/", which moves the host (the reported bypass)
    "http://127.0.0.2:8002\\@127.0.0.1:8001/x": "backslash",
    "http://169.254.169.254\\@allowed.example/../latest/meta-data/": "backslash",
    "http://evil.example\\.allowed.example/": "backslash",
    # NUL, control characters, spaces: getaddrinfo stops at the NUL
    "http://127.0.0.1\x00.allowed.example/": "control character",
    "http://allowed.example\t.evil/": "control character",
    "http://allowed.example /x": "control character",
    "http://allowed.example\u0085/": "control character",
    # credentials: stored nowhere, and "a@b" is read two ways
    "http://user:pw@allowed.example/": "credentials",
    "http://allowed.example@evil.example/": "credentials",
    "http://us\u00e9r:p\u00e4ss@allowed.example/": "credentials",
    # ports and brackets
    "http://allowed.example:99999/": "Port out of range",
    "http://allowed.example:80a/": "Port could not be cast",
    "http://[::1/": "Invalid IPv6 URL",
    "http://[::1%25eth0]/": "IPv6",
    # hosts that are not plain names or plain IPv4 addresses
    "http://../": "host",
    "http://2130706433/": "not a canonical IPv4",
    "http://0x7f.1/": "not a canonical IPv4",
    "http://127.1/": "not a canonical IPv4",
    "http://allowed.example%2f.evil/": "host",
    "http://a_b.allowed.example/": "host",
    "http://xn--/": "host",
    # text UTF-8 cannot carry, and schemes we do not fetch
    "http://allowed.example/\udc80": "surrogates",
    "file:///etc/passwd": "unsupported scheme",
    "gopher://allowed.example/": "unsupported scheme",
    # too long to be a real link
    "http://allowed.example/" + "a" * 9000: "longer than 8192",
}


@pytest.mark.parametrize("url", sorted(REFUSED))
def test_ambiguous_or_malformed_links_are_refused(url: str) -> None:
    with pytest.raises(BadLink, match=REFUSED[url]):
        links().canonical(url)


OUTSIDE = [
    "http://evil.example/",
    "http://sub.allowed.example/",  # "host" means that host; "*.host" adds subdomains
    "http://allowed.example:8080/",  # other ports must be listed
    "http://127.0.0.1:8002/",
    "http://127.0.0.1/",
    "http://169.254.169.254/latest/meta-data/",
    "http://faß.example/",
]


@pytest.mark.parametrize("url", OUTSIDE)
def test_links_outside_the_allow_list_are_left_out(url: str) -> None:
    assert links().canonical(url) is None


def test_the_host_checked_is_the_host_connected_to() -> None:
    f = links("allowed.example", "faß.example")
    # one IDNA mapping (UTS #46) for the allow-list and the link alike
    assert f.canonical("http://faß.example/x") == "http://xn--fa-hia.example/x"
    assert links("fass.example").canonical("http://faß.example/x") is None
    # full-width and zero-width characters map to the same name the client connects to
    for spelling in ("http://ａｌｌｏｗｅｄ.example/", "http://allo\u200bwed.example/"):
        url = f.canonical(spelling)
        assert url == "http://allowed.example/"
        assert client_url(url).raw_host == "allowed.example"
    # http and https are one site; the port of a listed host:port is that port only
    assert f.canonical("https://allowed.example/") == "https://allowed.example/"
    assert links().canonical("http://127.0.0.1:8001/a/../b") == "http://127.0.0.1:8001/b"


def test_allow_list_entries() -> None:
    allow = AllowList([parse_entry(e) for e in ("*.shop.example", "api.example:8443", "[::1]")])
    assert allow.allows("shop.example", 443) and allow.allows("a.b.shop.example", 80)
    assert not allow.allows("shop.example", 8080) and not allow.allows("evilshop.example", 80)
    assert allow.allows("api.example", 8443) and not allow.allows("api.example", 443)
    assert allow.allows("::1", 80)
    anywhere = AllowList([parse_entry("*")])
    assert anywhere.allows("any.example", 80) and not anywhere.allows("any.example", 22)
    assert AllowList([parse_entry("*:*")]).allows("any.example", 22)
    for bad in ("user@host", "host/path", "ho st", "host:99999", ""):
        with pytest.raises(ConfigError, match="allowed_domains entry"):
            parse_entry(bad)
    with pytest.raises(ConfigError, match="allowed_domains is empty"):
        AllowList.from_settings((), [])


def test_the_default_allow_list_is_the_start_urls_hosts_with_their_ports() -> None:
    f = LinkFilter(CrawlSettings(), ["http://127.0.0.1:8001/start", "https://shop.example/"])
    assert f.canonical("http://127.0.0.1:8001/x") == "http://127.0.0.1:8001/x"
    assert f.canonical("http://127.0.0.1:8002/x") is None
    assert f.canonical("http://shop.example/x") == "http://shop.example/x"  # 80 ~ 443
    assert f.canonical("http://www.shop.example/x") is None


def test_an_origin_outside_the_allow_list_is_named_once_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="crashsafe.crawl")
    f = LinkFilter(CrawlSettings(), ["http://127.0.0.1:8001/start"])
    for url in ("http://127.0.0.1:8002/a", "http://127.0.0.1:8002/b", "http://127.0.0.1:8001/c",
                "http://other.example/d"):  # fmt: skip
        f.canonical(url)
    said = [r.getMessage() for r in caplog.records if r.name == "crashsafe.crawl"]
    assert said == [
        "not following URLs of 127.0.0.1:8002 (first: http://127.0.0.1:8002/a): outside the "
        "allow-list; add '127.0.0.1' (or '127.0.0.1:8002') to allowed_domains",
        "not following URLs of other.example:80 (first: http://other.example/d): outside the "
        "allow-list; add 'other.example' (or 'other.example:80') to allowed_domains",
    ]


def test_canonicalisation_is_linear_in_the_length() -> None:
    # Was quadratic (a lookahead scanning to the end at each backtracking step): 64 KB of
    # host took a second, 1 MB would take minutes. A bound on a hang, not a speed target.
    f = links("*")
    for link in ("http://" + "a" * 1_000_000, "http://a.example/" + "a/" * 500_000):
        started = time.perf_counter()
        with pytest.raises(BadLink, match="longer than"):
            f.canonical(link)
        assert time.perf_counter() - started < 2
    from crashsafe.ids import canonical_url

    started = time.perf_counter()
    canonical_url("http://" + "a" * 1_000_000)
    assert time.perf_counter() - started < 2


def test_database_urls_are_shown_without_their_password() -> None:
    from crashsafe.store import masked, open_store

    assert masked("postgresql://bob:s3cret@db:5432/x") == "postgresql://bob:***@db:5432/x"
    assert masked("sqlite:///a.db") == "sqlite:///a.db"
    assert masked("sqlite:////abs/a.db") == "sqlite:////abs/a.db"  # as written, all else
    assert masked("postgresql://u:p@ss@h/x?password=q#f") == "postgresql://u:***@h/x?password=***"
    # (a review of #24: forms whose password still showed)
    for url in ("postgresql://u:PW#tail@h/x", "postgresql://u:PW?tail@h/x",
                "postgresql://u:PW/tail@h/x", "postgresql://h/x?pass%77ord=PW",
                "host=h port=1 password=PW dbname=x", "host=h password='P W' dbname=x",
                "sqlite:////tmp/x.db?password=PW",
                "postgresql://h/x?sslpassword=PW#f"):  # fmt: skip
        assert "PW" not in masked(url).replace("%77", ""), url
    pytest.importorskip("psycopg")
    with pytest.raises(ConfigError) as bad:  # psycopg's own message quoted the token
        open_store("postgresql://u:PW%zzbad@127.0.0.1:1/x")
    assert "PW" not in str(bad.value) and "%25" in str(bad.value)
    with pytest.raises(ConfigError) as info:
        open_store("mysql://bob:s3cret@db/x")
    assert "s3cret" not in str(info.value) and "bob:***@db" in str(info.value)
