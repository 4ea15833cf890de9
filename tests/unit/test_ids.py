from __future__ import annotations

import hashlib
from urllib.parse import parse_qsl, urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from crashsafe.ids import canonical_url, record_id, stable_text_id


def test_record_id_is_sha256_of_source_and_key() -> None:
    expected = hashlib.sha256(b"example-shop:SKU-1").hexdigest()[:32]
    assert record_id("example-shop", "SKU-1") == expected
    assert len(expected) == 32


@given(st.text(), st.text(), st.text(), st.text())
def test_two_records_never_share_an_id(s1: str, k1: str, s2: str, k2: str) -> None:
    # st.text() yields lone surrogates, NUL, ":" and "\\" too; the id is a function of the
    # source's and the key's code points, so only the same pair gives the same id
    # (SHA-256 collisions aside)
    assert (record_id(s1, k1) == record_id(s2, k2)) == ((s1, k1) == (s2, k2))


def test_sources_with_a_colon_or_a_backslash_cannot_borrow_a_key() -> None:
    # (an adversary's find: "a" + "b:c" and "a:b" + "c" hashed the same text)
    assert record_id("a", "b:c") != record_id("a:b", "c")
    assert record_id("x\\", "y:z") != record_id("x:y", "z")
    assert record_id("a", "b") == hashlib.sha256(b"a:b").hexdigest()[:32]  # as it was


def test_keys_that_an_escape_would_confuse_have_their_own_ids() -> None:
    keys = ["s\ud800", "s\\ud800", "a\x00b", "a\\x00b", "\udc80", "\\udc80"]
    assert len({record_id("shop", k) for k in keys}) == len(keys)
    # every key UTF-8 can carry keeps the id it always had (NUL and non-ASCII too)
    for key in ["SKU-1", "a\x00b", "Käse €", "🦀"]:
        assert record_id("shop", key) == hashlib.sha256(f"shop:{key}".encode()).hexdigest()[:32]


def test_stable_text_id_normalises_space_and_case() -> None:
    a = stable_text_id("Great  product,\n would BUY again ")
    assert a == stable_text_id("great product, would buy again")
    assert a.startswith("D") and len(a) == 17
    assert a == "D" + hashlib.sha256(b"great product, would buy again").hexdigest()[:16]
    assert a != stable_text_id("great product, would not buy again")


def test_canonical_url_examples() -> None:
    assert canonical_url("HTTP://Example.COM:80/a?b=2&a=1#top") == "http://example.com/a?a=1&b=2"
    assert canonical_url("https://ex.com:443/") == "https://ex.com/"
    assert canonical_url("https://ex.com:8443/") == "https://ex.com:8443/"
    assert canonical_url("http://ex.com") == "http://ex.com/"
    assert (
        canonical_url("http://ex.com/p?utm_source=x&utm_medium=y&gclid=1&fbclid=2&id=7")
        == "http://ex.com/p?id=7"
    )
    assert canonical_url("http://ex.com/p?ref=a&id=7", strip_params=["ref"]) == (
        "http://ex.com/p?id=7"
    )
    assert canonical_url("http://ex.com/p?sid_x=1&id=7", strip_params=["sid_*"]) == (
        "http://ex.com/p?id=7"
    )


params = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "id", "utm_source", "utm_x", "gclid", "q", "fbclid"]),
        st.sampled_from(["", "1", "x y", "a%20b", "-_", "z9"]),
    ),
    max_size=6,
)
hosts = st.sampled_from(["example.com", "EXAMPLE.com", "shop.example.COM"])
paths = st.sampled_from(["/", "/a", "/a/b", "/a%20b", "/p/1"])


def build(scheme: str, host: str, port: str, path: str, query: list[tuple[str, str]]) -> str:
    q = "&".join(f"{k}={v}" for k, v in query)
    return f"{scheme}://{host}{port}{path}" + (f"?{q}" if q else "")


@given(st.sampled_from(["http", "HTTP", "https"]), hosts, paths, params, st.text(max_size=4))
def test_canonical_url_properties(
    scheme: str, host: str, path: str, query: list[tuple[str, str]], fragment: str
) -> None:
    default_port = ":80" if scheme.lower() == "http" else ":443"
    url = build(scheme, host, default_port, path, query) + "#" + fragment
    canon = canonical_url(url)
    # idempotent, and equal for the same content written differently
    assert canonical_url(canon) == canon
    assert canon == canonical_url(build(scheme.lower(), host.lower(), "", path, query[::-1]))
    parts = urlsplit(canon)
    assert parts.fragment == "" and parts.port is None
    assert parts.netloc == parts.netloc.lower()
    keys = [k for k, _ in parse_qsl(parts.query, keep_blank_values=True)]
    assert not any(k.startswith("utm_") or k in {"gclid", "fbclid"} for k in keys)
    assert keys == sorted(keys)


simple_paths = st.lists(
    st.text(alphabet="abcXYZ019._~-", min_size=0, max_size=6), min_size=1, max_size=4
).map(lambda parts: "/" + "/".join(parts))


@settings(max_examples=500)
@given(
    st.sampled_from(["http", "https"]),
    st.sampled_from(["example.com", "a.b-c.org", "127.0.0.1"]),
    st.sampled_from(["", ":8000", ":80", ":443", ":8443", ":0080"]),
    simple_paths,
)
def test_fast_path_agrees_with_w3lib(scheme: str, host: str, port: str, path: str) -> None:
    """URLs that skip w3lib must be exactly what w3lib would have made of them."""
    from w3lib.url import canonicalize_url

    url = f"{scheme}://{host}{port}{path}"
    default = ":80/" if scheme == "http" else ":443/"
    expected = canonicalize_url(url.replace(":0080/", ":80/", 1).replace(default, "/", 1))
    assert canonical_url(url) == expected
