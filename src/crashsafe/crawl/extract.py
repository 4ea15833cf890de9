"""Run a spider callback on a page and turn what it yields into rows to commit."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.spider import Link, Page, Record, Spider
from crashsafe.ids import canonical_url, record_id
from crashsafe.store import NewUrl, RecordRow


class ParseError(Exception):
    """The spider's code raised, or yielded something crashsafe cannot store."""


CANONICAL_CACHE = 20_000  # links remembered; then the cache starts over


class LinkFilter:
    """Decides which links enter the frontier, in canonical form.

    Answers are cached: most pages of a site repeat the same menus, pagers and footers.
    """

    def __init__(self, settings: CrawlSettings, start_urls: Iterable[str]) -> None:
        self.strip = settings.strip_query_params
        self.max_depth = settings.max_depth
        domains = settings.allowed_domains
        if domains is None:
            domains = tuple({urlsplit(u).hostname or "" for u in start_urls} - {""})
        self.domains = tuple(d.lower().lstrip(".") for d in domains)
        self._canonical: dict[str, str | None] = {}

    def host_allowed(self, url: str) -> bool:
        return self._allowed(urlsplit(url).hostname)

    def _allowed(self, hostname: str | None) -> bool:
        host = (hostname or "").lower()
        return not self.domains or any(host == d or host.endswith("." + d) for d in self.domains)

    def canonical(self, url: str) -> str | None:
        """The canonical form of ``url``, or None if it is not to be crawled."""
        cache = self._canonical
        try:
            return cache[url]
        except KeyError:
            pass
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not self._allowed(parts.hostname):
            result = None
        else:
            result = canonical_url(url, strip_params=self.strip)
        if len(cache) >= CANONICAL_CACHE:
            cache.clear()
        cache[url] = result
        return result

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


def to_rows(
    items: Iterable[Any], *, page: Page, source: str, links: LinkFilter
) -> tuple[list[RecordRow], list[NewUrl]]:
    """Sort yielded items into records and new URLs, validating as we go."""
    records: list[RecordRow] = []
    new_urls: list[NewUrl] = []
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
                raise ParseError(
                    f"record {key!r} from {page.url}: data is not JSON: {exc}"
                ) from exc
            records.append(row)
        elif isinstance(item, Link | str):
            link = item if isinstance(item, Link) else Link(page.urljoin(item))
            new = links.new_url(link, page.depth + 1)
            if new is not None:
                new_urls.append(new)
        elif item is None:
            continue
        else:
            raise ParseError(
                f"parse yielded {type(item).__name__} from {page.url}: yield Record(...), "
                "page.follow(...) or a URL string"
            )
    return records, new_urls
