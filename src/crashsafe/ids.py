"""Identifiers derived from the data: record ids, stable text ids, canonical URLs.

Ids never come from time, position or an auto-increment, so writing the same thing twice
lands on the same row. Python's ``hash()`` is never used: it changes between runs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import idna

__all__ = [
    "DEFAULT_STRIP_PARAMS",
    "canonical_url",
    "record_id",
    "stable_text_id",
]

#: Query parameters removed by default: they track the visitor, not the content.
#: A trailing ``*`` matches a prefix.
DEFAULT_STRIP_PARAMS: tuple[str, ...] = ("utm_*", "gclid", "fbclid", "msclkid", "mc_eid")

_DEFAULT_PORTS = {"http": 80, "https": 443}
_WHITESPACE = re.compile(r"\s+")
# Already canonical: lower-case scheme and host, no default port, a path of unreserved
# characters only, no query, no fragment. Most links on most sites look like this, and
# w3lib's full treatment costs ~100 µs a URL; such URLs come back unchanged from it.
# Dot segments ("/./", "/../") are resolved by w3lib, so a path holding one is not simple.
# (No lookahead inside: one that scans to the end at each backtracking step made a 64 KB
# link take a second; dot segments are looked for apart, in linear time.)
#: Groups: host, port (or None), path. Also the allow decision's fast path (crawl/allow.py).
SIMPLE_URL = re.compile(r"https?://([a-z0-9.-]+)(?::([1-9]\d{0,4}))?(/[A-Za-z0-9._~/-]*)")
DOT_SEGMENT = re.compile(r"/\.\.?(?:/|$)")


def record_id(source: str, key: str) -> str:
    """Return the id of the record with natural ``key`` from ``source``.

    SHA-256 of ``"{source}:{key}"`` in UTF-8, first 32 hex characters (128 bits), made
    one to one: lone surrogates, which UTF-8 has no bytes for, are encoded as their code
    points are (``surrogatepass``), so ``"s\\ud800"`` (an s and a lone surrogate) and
    ``r"s\\ud800"`` (an s, a backslash and five letters) are two records; and a ``:`` or
    ``\\`` in the source is escaped with a backslash, so that source ``"a:b"`` with key
    ``"c"`` is not source ``"a"`` with key ``"b:c"``. Every other source and key hashes as
    it always did. A key is text: the integer ``1`` is the key ``"1"``.
    """
    if ":" in source or "\\" in source:
        source = source.replace("\\", "\\\\").replace(":", "\\:")
    return hashlib.sha256(f"{source}:{key}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def stable_text_id(text: str) -> str:
    """Return ``"D"`` + 16 hex chars of SHA-256 of ``text`` normalised.

    Normalised means whitespace collapsed to single spaces, stripped and lower-cased, so
    the same review pasted with different spacing or case gets the same id.
    """
    normalised = _WHITESPACE.sub(" ", text).strip().lower()
    return "D" + hashlib.sha256(normalised.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def idna_host(host: str) -> str:
    """``host`` lower-cased and, if not ASCII, IDNA-encoded with the UTS #46 mapping: the
    one mapping used everywhere, so that a name is checked as it is connected to (raises
    ``ValueError`` for a name IDNA refuses)."""
    if host.isascii():
        return host.lower()
    return idna.encode(host, uts46=True).decode("ascii")


def _strip_matcher(params: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    exact = {p.lower() for p in params if not p.endswith("*")}
    prefixes = tuple(p[:-1].lower() for p in params if p.endswith("*"))
    return frozenset(exact), prefixes


def canonical_url(url: str, *, strip_params: Iterable[str] = DEFAULT_STRIP_PARAMS) -> str:
    """Return the key under which ``url`` is stored in the frontier.

    Lower-cases scheme and host, drops the default port and the fragment, removes the
    query parameters named in ``strip_params`` (``utm_*`` style prefixes allowed) and
    sorts the rest; percent-encoding is normalised by w3lib.
    """
    simple = SIMPLE_URL.fullmatch(url)
    if simple and simple[2] not in ("80", "443") and not DOT_SEGMENT.search(simple[3]):
        return url
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    netloc = parts.netloc
    host = parts.hostname or ""
    if not host.isascii():  # one IDNA mapping for every URL (w3lib's codec is IDNA 2003)
        userinfo, _, hostport = netloc.rpartition("@")
        encoded = idna_host(host)
        hostport = encoded + hostport[hostport.lower().find(host) + len(host) :]
        netloc = f"{userinfo}@{hostport}" if userinfo else hostport
    if parts.port is not None and _DEFAULT_PORTS.get(scheme) == parts.port:
        host = parts.hostname or ""
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        userinfo = netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{host}" if userinfo else host
    query = parts.query
    if query:
        exact, prefixes = _strip_matcher(strip_params)
        kept = [
            (k, v)
            for k, v in parse_qsl(query, keep_blank_values=True)
            if k.lower() not in exact and not k.lower().startswith(prefixes)
        ]
        query = urlencode(kept)
    from w3lib.url import canonicalize_url  # (imported when first needed: 20 ms a start)

    result: str = canonicalize_url(urlunsplit((scheme, netloc, parts.path, query, "")))
    return result
