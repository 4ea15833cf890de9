"""Sitemaps, as https://www.sitemaps.org/protocol.html specifies: pure parsing, no I/O.

A ``<urlset>`` of pages or a ``<sitemapindex>`` of sitemaps, in XML, maybe gzipped, or a
UTF-8 text file of one URL per line. Bodies come from servers we do not trust, so each step
is bounded: gzip is inflated in steps and refused past ``max_bytes`` (a bomb never lands in
memory), the XML parser expands no entity and loads no DTD or URL, entries are capped.
"""

from __future__ import annotations

import contextlib
import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from protego import Protego

from crashsafe.errors import CrashsafeError

__all__ = [
    "MAX_SITEMAP_BYTES", "MAX_SITEMAP_ENTRIES", "Sitemap", "SitemapEntry", "SitemapError",
    "lastmod_time", "read_sitemap", "sitemaps_in_robots",
]  # fmt: skip

MAX_SITEMAP_BYTES = 50 * 2**20  # sitemaps.org: at most 50 MB uncompressed
MAX_SITEMAP_ENTRIES = 50_000  # sitemaps.org: at most 50 000 URLs per file

_GZIP_MAGIC = b"\x1f\x8b"
_FEED = 64 * 1024  # parse in slices so that reaching max_entries stops early
# no entity expanded (XXE, billion laughs), no DTD or URL fetched, libxml2's size caps kept
_SAFE_XML = {"resolve_entities": False, "no_network": True, "load_dtd": False, "huge_tree": False}
_ITEM = {"urlset": "url", "sitemapindex": "sitemap"}
_YEAR_MONTH = re.compile(r"([0-9]{4})(?:-([0-9]{2}))?")  # W3C forms fromisoformat rejects


class SitemapError(CrashsafeError):
    """The body is not a sitemap that can be read safely: check the sitemap URL."""


@dataclass(frozen=True, slots=True)
class SitemapEntry:
    """One ``<url>`` of a urlset or one ``<sitemap>`` of an index."""

    loc: str
    lastmod: str | None
    alternates: tuple[str, ...] = ()
    changefreq: str | None = None  # always, hourly, daily, weekly, monthly, yearly, never


@dataclass(frozen=True, slots=True)
class Sitemap:
    """What a sitemap lists; ``truncated`` when entries past ``max_entries`` were dropped."""

    kind: Literal["urlset", "sitemapindex"]
    entries: list[SitemapEntry]
    truncated: bool


def read_sitemap(
    body: bytes, *, max_bytes: int = MAX_SITEMAP_BYTES, max_entries: int = MAX_SITEMAP_ENTRIES
) -> Sitemap:
    """Read a sitemap or sitemap index, gzipped or not, XML or plain text.

    Args:
        body: The body as received; gzip is told by its magic bytes, not by name or header.
        max_bytes: Refuse bodies larger than this once decompressed.
        max_entries: Keep at most this many entries; more set ``truncated``.

    Returns:
        Its kind and entries; a broken XML body yields the entries complete before the break.

    Raises:
        SitemapError: Too large, corrupt or truncated gzip, or not a sitemap at all.
    """
    if body.startswith(_GZIP_MAGIC):
        body = _gunzip(body, max_bytes)
    elif len(body) > max_bytes:
        raise _too_large(max_bytes, "")
    body = body.removeprefix(b"\xef\xbb\xbf").lstrip()  # a UTF-8 BOM, blank lines
    if not body.startswith(b"<"):
        return _read_text(body, max_entries)
    return _read_xml(body, max_entries)


def lastmod_time(text: str | None) -> float | None:
    """POSIX time of a W3C datetime ``<lastmod>``, None if absent or unreadable; a bare date
    is midnight UTC, a time without the (required) zone is taken as UTC, as sites omit it."""
    if text is None:
        return None
    text = text.strip()
    try:
        if match := _YEAR_MONTH.fullmatch(text):
            when = datetime(int(match[1]), int(match[2] or 1), 1, tzinfo=UTC)
        else:
            when = datetime.fromisoformat(text)
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
        return when.timestamp()
    except (ValueError, OverflowError):
        return None


def sitemaps_in_robots(text: str) -> list[str]:
    """The URLs of the ``Sitemap:`` lines of a robots.txt, in order (any letter case)."""
    return [str(url) for url in Protego.parse(text).sitemaps]


def _gunzip(body: bytes, max_bytes: int) -> bytes:
    """Inflate every gzip member of ``body``, never holding more than ``max_bytes + 1``."""
    out, rest = bytearray(), body
    while rest:  # a gzip file may hold several members, one after another
        inflater = zlib.decompressobj(wbits=31)
        try:
            while not inflater.eof:
                # max_length caps each step, so a bomb stops at the limit, not in memory
                chunk = inflater.decompress(rest, max_bytes + 1 - len(out))
                out += chunk
                if len(out) > max_bytes:
                    raise _too_large(max_bytes, " once decompressed (a gzip bomb?)")
                rest = inflater.unconsumed_tail
                if not (rest or chunk or inflater.eof):
                    raise SitemapError("gzip sitemap is truncated (cut short?): fetch it again")
        except zlib.error as exc:
            raise SitemapError(f"gzip sitemap is corrupt ({exc}): fetch it again") from exc
        rest = inflater.unused_data.lstrip(b"\x00")  # zero padding, as gzip.open allows
    return bytes(out)


def _too_large(max_bytes: int, how: str) -> SitemapError:
    return SitemapError(f"sitemap larger than {max_bytes} bytes{how}: skipped (see max_bytes)")


def _read_text(body: bytes, max_entries: int) -> Sitemap:
    """A text sitemap: one absolute http(s) URL per line, other lines ignored."""
    lines = (line.strip() for line in body.decode("utf-8", errors="replace").splitlines())
    urls = [url for url in lines if url.lower().startswith(("http://", "https://"))]
    entries = [SitemapEntry(url, None) for url in urls[:max_entries]]
    return Sitemap("urlset", entries, truncated=len(urls) > max_entries)


def _read_xml(body: bytes, max_entries: int) -> Sitemap:
    from lxml import etree  # (here: a crawl that reads no sitemap need not wait for it)

    parser = etree.XMLPullParser(events=("start", "end"), recover=True, **_SAFE_XML)
    root: Any = None
    kind: Literal["urlset", "sitemapindex"] = "urlset"
    entries: list[SitemapEntry] = []
    for offset in range(0, len(body), _FEED):
        try:
            parser.feed(body[offset : offset + _FEED])
        except etree.XMLSyntaxError:
            break  # beyond recovery: keep what came before
        for event, element in parser.read_events():
            name = etree.QName(element).localname
            if root is None:
                if name not in _ITEM:
                    raise SitemapError(
                        f"not a sitemap: root element <{name}>, expected <urlset> or "
                        "<sitemapindex>: check the sitemap URL"
                    )
                root, kind = element, ("urlset" if name == "urlset" else "sitemapindex")
            elif event == "end" and element.getparent() is root:
                entry = _entry(element) if name == _ITEM[kind] else None
                if entry is not None:
                    if len(entries) == max_entries:
                        return Sitemap(kind, entries, truncated=True)
                    entries.append(entry)
                # drop what is read so a 50 MB sitemap is never held as a whole tree
                element.clear()
                while element.getprevious() is not None:
                    del root[0]
    # Events that only close() produces are elements the recovering parser closed itself
    # at a break: their text may be cut mid-URL, so they are not read.
    with contextlib.suppress(etree.XMLSyntaxError):
        parser.close()
    if root is None:
        reason = parser.error_log.last_error or "no element"
        raise SitemapError(f"not a sitemap: no XML element could be read ({reason})")
    return Sitemap(kind, entries, truncated=False)


def _entry(element: Any) -> SitemapEntry | None:
    """The entry of one ``<url>`` or ``<sitemap>``; None without a usable ``<loc>``."""
    loc: str | None = None
    lastmod: str | None = None
    changefreq: str | None = None
    alternates: list[str] = []
    from lxml import etree

    for child in element:
        if not isinstance(child.tag, str):
            continue  # comments, processing instructions, unresolved entities
        name = etree.QName(child).localname
        # A node inside <loc> is an unresolved entity (e.g. XXE) or a comment: the text
        # before it would be a wrong URL, so such a <loc> is not used.
        if name == "loc" and loc is None and len(child) == 0:
            loc = (child.text or "").strip() or None
        elif name == "lastmod" and lastmod is None:
            lastmod = (child.text or "").strip() or None
        elif name == "changefreq" and changefreq is None:
            changefreq = (child.text or "").strip().lower()[:16] or None
        elif name == "link" and child.get("rel") == "alternate" and child.get("href"):
            alternates.append(child.get("href").strip())
    return None if loc is None else SitemapEntry(loc, lastmod, tuple(alternates), changefreq)
