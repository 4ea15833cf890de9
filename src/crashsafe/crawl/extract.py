"""Run a spider callback on a page and turn what it yields into rows to commit."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.spider import Link, Page, Record, Spider
from crashsafe.ids import canonical_url, record_id
from crashsafe.store import NewUrl, RecordRow


class ParseError(Exception):
    """The spider's code raised, or yielded something crashsafe cannot store."""


CANONICAL_CACHE = 20_000  # links remembered; then the cache starts over


class BadLink(Exception):
    """A link that cannot be crawled: malformed, or a scheme we do not fetch."""


_BAD = "\x00bad"  # cached answer for a bad link (the reason follows)


def _hostname(url: str) -> str:
    try:
        return urlsplit(url).hostname or ""
    except ValueError:
        return ""


class LinkFilter:
    """Decides which links enter the frontier, in canonical form.

    Answers are cached: most pages of a site repeat the same menus, pagers and footers.
    A malformed or unsupported link raises :class:`BadLink`; one that is only not wanted
    (another host, too deep) gives None.
    """

    def __init__(self, settings: CrawlSettings, start_urls: Iterable[str]) -> None:
        self.strip = settings.strip_query_params
        self.max_depth = settings.max_depth
        domains = settings.allowed_domains
        if domains is None:
            domains = tuple({_hostname(u) for u in start_urls} - {""})
        self.domains = tuple(d.lower().lstrip(".") for d in domains)
        self._canonical: dict[str, str | None] = {}

    def host_allowed(self, url: str) -> bool:
        return self._allowed(urlsplit(url).hostname)

    def _allowed(self, hostname: str | None) -> bool:
        host = (hostname or "").lower()
        return not self.domains or any(host == d or host.endswith("." + d) for d in self.domains)

    def canonical(self, url: str) -> str | None:
        """The canonical form of ``url``, or None if it is not to be crawled.

        Raises:
            BadLink: ``url`` is malformed (bad IPv6 literal, port out of range, text that
                cannot be encoded) or not http(s).
        """
        cache = self._canonical
        try:
            result = cache[url]
        except KeyError:
            result = self._canonical_uncached(url)
            if len(cache) >= CANONICAL_CACHE:
                cache.clear()
            cache[url] = result
        if result is not None and result.startswith(_BAD):
            raise BadLink(result[len(_BAD) :])
        return result

    def _canonical_uncached(self, url: str) -> str | None:
        try:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https"):
                return f"{_BAD}unsupported scheme {parts.scheme or '(none)'!r}"
            parts.port  # noqa: B018 -- raises for a port out of range or not a number
            if not parts.hostname:
                return f"{_BAD}no host"
            if not self._allowed(parts.hostname):
                return None
            return canonical_url(url, strip_params=self.strip)
        except ValueError as exc:  # UnicodeError included
            return f"{_BAD}{exc}"

    def new_url(self, link: Link, depth: int) -> NewUrl | None:
        if self.max_depth is not None and depth > self.max_depth:
            return None
        url = self.canonical(link.url)
        return None if url is None else NewUrl(url, depth, link.callback, link.priority)


async def run_callback(spider: Spider, page: Page, callback: str | None) -> list[Any]:
    """Call ``spider.<callback or parse>(page)`` and gather everything it yields."""
    name = callback or "parse"
    method = getattr(spider, name, None)
    if not callable(method):
        raise ParseError(f"spider {type(spider).__name__} has no method {name!r}")
    result = method(page)
    if result is None:
        return []
    if inspect.isasyncgen(result):
        return [item async for item in result]
    if inspect.isawaitable(result):
        result = await result
        return [] if result is None else list(result)
    return list(result)


@dataclass(slots=True)
class Rows:
    """What a page yielded, ready to commit. ``skipped`` holds the first few bad links
    (with the reason); ``links_skipped`` counts them all."""

    records: list[RecordRow] = field(default_factory=list)
    links: list[NewUrl] = field(default_factory=list)
    links_skipped: int = 0
    skipped: list[str] = field(default_factory=list)


SKIPPED_SHOWN = 3  # bad links kept per page to show in the log


def to_rows(items: Iterable[Any], *, page: Page, source: str, links: LinkFilter) -> Rows:
    """Sort yielded items into records and new URLs, validating as we go.

    The same record key yielded twice by one page is stored once: the last one wins. A
    malformed or unsupported link is skipped and counted, never fails the page.
    """
    records: dict[str, RecordRow] = {}
    rows = Rows()
    for item in items:
        if isinstance(item, Record):
            if item.key is None or item.key == "":
                raise ParseError(
                    f"Record with an empty key from {page.url}: the key selector matched "
                    "nothing? Every record needs a natural key (a SKU, a slug)."
                )
            key = str(item.key)
            src = item.source or source
            try:
                row = RecordRow.build(
                    id=record_id(src, key), source=src, key=key, url=page.url, data=item.data
                )
            except (TypeError, ValueError) as exc:
                hint = ""
                if "Out of range float" in str(exc):
                    hint = " (NaN or Infinity: store None or a string instead)"
                raise ParseError(
                    f"record {key!r} from {page.url}: data is not JSON: {exc}{hint}"
                ) from exc
            records.pop(row.id, None)  # re-inserted: the page's order follows the last one
            records[row.id] = row
        elif isinstance(item, Link | str):
            try:
                link = item if isinstance(item, Link) else Link(page.urljoin(item))
                new = links.new_url(link, page.depth + 1)
            except (BadLink, ValueError) as exc:
                rows.links_skipped += 1
                if len(rows.skipped) < SKIPPED_SHOWN:
                    text = item.url if isinstance(item, Link) else item
                    rows.skipped.append(f"{text[:200]!r}: {exc}")
                continue
            if new is not None:
                rows.links.append(new)
        elif item is None:
            continue
        else:
            raise ParseError(
                f"parse yielded {type(item).__name__} from {page.url}: yield Record(...), "
                "page.follow(...) or a URL string"
            )
    rows.records = list(records.values())
    return rows
