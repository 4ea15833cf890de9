"""Run a spider callback on a page and turn what it yields into rows to commit."""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from crashsafe.crawl.allow import BadLink, LinkFilter
from crashsafe.crawl.spider import Link, Page, Record, Spider, callback_name
from crashsafe.ids import record_id
from crashsafe.store import NewUrl, RecordRow
from crashsafe.store.values import storable

__all__ = ["BadLink", "LinkFilter", "ParseError", "Rows", "run_callback", "to_rows"]


class ParseError(Exception):
    """The spider's code raised, or yielded something crashsafe cannot store."""


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


SKIPPED_SHOWN = 3
_LINKS = (Link, str)  # bad links kept per page to show in the log


_PRIORITY = range(-(2**63), 2**63)  # what the database's integer holds


def _checked(link: Link) -> Link:
    """``link`` if the store can keep it; a callback given as a method is kept by name."""
    if not isinstance(link.url, str):
        raise BadLink(f"the URL is a {type(link.url).__name__}, not a string")
    callback = link.callback
    if callable(callback):  # callback=self.parse_item: store the method's name
        callback = callback_name(callback)
        link = Link(link.url, callback, link.priority)
    if callback is not None and not (isinstance(callback, str) and callback.isidentifier()):
        raise BadLink(f"callback {callback!r} is not the name of a spider method")
    if type(link.priority) is not int or link.priority not in _PRIORITY:
        raise BadLink(f"priority {link.priority!r} is not an integer within 64 bits")
    return link


def to_rows(
    items: Iterable[Any],
    *,
    page: Page,
    source: str,
    links: LinkFilter,
    max_links: int = 10_000,
) -> Rows:
    """Sort yielded items into records and new URLs, validating as we go.

    The same record key yielded twice by one page is stored once: the last one wins. A
    malformed or unsupported link is skipped and counted, never fails the page; so are the
    links beyond the first ``max_links``.
    """
    records: dict[str, RecordRow] = {}
    rows = Rows()
    seen = 0
    for item in items:
        if isinstance(item, Record):
            if item.key is None or item.key == "":
                raise ParseError(
                    "Record with an empty key: the key selector matched "
                    "nothing? Every record needs a natural key (a SKU, a slug)."
                )
            key, src = str(item.key), item.source or source
            try:
                rid = record_id(src, key)
            except UnicodeEncodeError:  # record_id hashes UTF-8: escape what it cannot carry
                key, src = storable(key), storable(src)
                rid = record_id(src, key)
            try:
                row = RecordRow.build(id=rid, source=src, key=key, url=page.url, data=item.data)
            except (TypeError, ValueError) as exc:
                hint = ""
                if "Out of range float" in str(exc):
                    hint = " (NaN or Infinity: store None or a string instead)"
                raise ParseError(f"record {key!r}: data is not JSON: {exc}{hint}") from exc
            records[row.id] = row  # the same key again: the last one wins
        elif isinstance(item, _LINKS):
            seen += 1
            if seen > max_links:
                rows.links_skipped += 1
                if seen == max_links + 1 and len(rows.skipped) < SKIPPED_SHOWN:
                    rows.skipped.append(f"links after the first {max_links}: max_links_per_page")
                continue
            try:
                link = _checked(item) if isinstance(item, Link) else Link(page.urljoin(item))
                new = links.new_url(link, page.depth + 1)
            except (BadLink, ValueError) as exc:
                rows.links_skipped += 1
                if len(rows.skipped) < SKIPPED_SHOWN:
                    text = str(item.url) if isinstance(item, Link) else item
                    rows.skipped.append(f"{text[:200]!r}: {exc}")
                continue
            if new is not None:
                rows.links.append(new)
        elif item is None:
            continue
        else:
            hint = (
                " (for a dict: Record(key=item['sku'], data=item))"
                if isinstance(item, dict)
                else ""
            )
            raise ParseError(
                f"parse yielded {type(item).__name__}: yield Record(...), "
                f"page.follow(...) or a URL string{hint}"
            )
    rows.records = list(records.values())
    return rows
