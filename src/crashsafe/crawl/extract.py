"""Run a spider callback on a page and turn what it yields into rows to commit."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from crashsafe.crawl.allow import BadLink, LinkFilter
from crashsafe.crawl.requests import BadRequest, Request, check_proxy, checked
from crashsafe.crawl.spider import Link, Page, Record, Spider
from crashsafe.errors import ConfigError
from crashsafe.ids import record_id
from crashsafe.store import NewUrl, RecordRow
from crashsafe.store.values import META_PREFIX

__all__ = [
    "BadLink",
    "ItemKeyMissing",
    "LinkFilter",
    "ParseError",
    "Rows",
    "item_keyer",
    "run_callback",
    "to_rows",
]


class ParseError(Exception):
    """The spider's code raised, or yielded something crashsafe cannot store."""


async def run_callback(spider: Spider, page: Page, callback: str | None) -> list[Any]:
    """Call ``spider.<callback or parse>(page, **page.cb_kwargs)`` and gather everything
    it yields."""
    name = callback or "parse"
    method = getattr(spider, name, None)
    if not callable(method):
        raise ParseError(f"spider {type(spider).__name__} has no method {name!r}")
    kwargs = page.cb_kwargs
    result = method(page, **kwargs) if kwargs else method(page)
    if result is None:
        return []
    if inspect.isasyncgen(result):
        return [item async for item in result]
    if inspect.isawaitable(result):
        result = await result
        return [] if result is None else list(result)
    return list(result)


async def run_errback(spider: Spider, name: str, failure: Any) -> list[Any]:
    """Call ``spider.<name>(failure)`` and gather everything it yields."""
    method = getattr(spider, name, None)
    if not callable(method):
        raise ParseError(f"spider {type(spider).__name__} has no errback method {name!r}")
    result = method(failure)
    if result is None:
        return []
    if inspect.isasyncgen(result):
        return [item async for item in result]
    if inspect.isawaitable(result):
        result = await result
        return [] if result is None else list(result)
    return list(result)


class ItemKeyMissing(ParseError):
    """The spider yielded an item (a dict, a dataclass...) but says not how its key is
    found: every page would fail the same way, so the crawl stops at the first."""


def item_keyer(spider: Spider) -> Callable[[Mapping[str, Any]], Any] | None:
    """How the key of an item the spider yields is found (``item_key``), or None.

    ``item_key`` is a field name, or a function of the item: a method
    (``def item_key(self, item)``), a static method, or a plain one-argument function
    set on the class (``item_key = lambda item: item["sku"]``).
    """
    raw = inspect.getattr_static(spider, "item_key", None)
    if raw is None:
        return None
    if isinstance(raw, str):
        field_name = raw
        return lambda item: item.get(field_name)
    if isinstance(raw, staticmethod | classmethod) or (
        inspect.isfunction(raw) and len(inspect.signature(raw).parameters) != 1
    ):
        return cast(Callable[[Mapping[str, Any]], Any], spider.item_key)
    if callable(raw):
        return cast(Callable[[Mapping[str, Any]], Any], raw)
    raise ConfigError(
        f"{type(spider).__name__}.item_key must be a field name or a function of the item, "
        f"not {type(raw).__name__}"
    )


@dataclass(slots=True)
class Rows:
    """What a page yielded, ready to commit. ``skipped`` holds the first few bad links
    (with the reason); ``links_skipped`` counts them all, ``links_cut`` the links
    beyond ``max_links`` (not followed), ``links_offsite`` those outside the allow-list
    (not followed)."""

    records: list[RecordRow] = field(default_factory=list)
    links: list[NewUrl] = field(default_factory=list)
    links_skipped: int = 0
    links_cut: int = 0
    links_offsite: int = 0
    skipped: list[str] = field(default_factory=list)


SKIPPED_SHOWN = 3
_META_KEY = '"' + META_PREFIX
_LINKS = (Request, Link, str)


def _request(item: Request | Link | str, page: Page) -> Request:
    """``item`` as a Request whose URL is absolute, if it can be sent and stored
    (:class:`BadRequest` says why not)."""
    if isinstance(item, str):
        return Request(page.urljoin(item))
    if isinstance(item, Link):
        item = Request(item.url, callback=item.callback, priority=item.priority)
    checked(item)
    proxy = (item.meta or {}).get("proxy") if isinstance(item.meta, Mapping) else None
    if proxy:
        try:
            check_proxy(proxy, 'meta["proxy"]')
        except ConfigError as exc:
            raise BadRequest(str(exc)) from None
    url = page.urljoin(item.url)
    return item if url == item.url else replace(item, url=url)  # (page.follow joined it)


def to_rows(
    items: Iterable[Any],
    *,
    page: Page,
    source: str,
    links: LinkFilter,
    max_links: int = 10_000,
    parent: str = "",
    item_key: Callable[[Mapping[str, Any]], Any] | None = None,
) -> Rows:
    """Sort yielded items into records and new requests, validating as we go.

    ``parent`` is the page's frontier key (``dont_filter`` requests are keyed by it);
    ``item_key`` finds the key of a plain item (a dict, a dataclass, a pydantic model).
    The same record key yielded twice by one page is stored once: the last one wins. A
    malformed or unsupported link is skipped and counted, never fails the page; so are
    the links beyond the first ``max_links``.
    """
    records: dict[str, RecordRow] = {}
    rows = Rows()
    seen = 0
    unfiltered = 0  # dont_filter requests so far: their place keys them
    outside = links.outside
    for item in items:
        if isinstance(item, Record):
            row = _record_row(item.key, item.data, item.source or source, page.url)
            records[row.id] = row  # the same key again: the last one wins
        elif isinstance(item, _LINKS):
            seen += 1
            if seen > max_links:
                rows.links_cut += 1
                continue
            try:
                request = _request(item, page)
                if request.dont_filter:
                    unfiltered += 1
                new = links.new_url(request, page.depth + 1, parent=parent, ordinal=unfiltered)
            except (BadLink, ValueError) as exc:
                rows.links_skipped += 1
                if len(rows.skipped) < SKIPPED_SHOWN:
                    text = item if isinstance(item, str) else str(item.url)
                    rows.skipped.append(f"{text[:200]!r}: {exc}")
                continue
            except ConfigError as exc:  # meta or cb_kwargs that cannot be stored
                raise ParseError(str(exc)) from None
            if new is not None:
                rows.links.append(new)
        elif item is None:
            continue
        elif (data := _item_data(item)) is not None:
            if item_key is None:
                raise ItemKeyMissing(
                    f"parse yielded a {type(item).__name__} item, but the spider does not say "
                    "which field identifies an item: set item_key = 'sku' (a field name) or a "
                    "function of the item on the spider class, or yield Record(key=..., data=...)"
                )
            try:
                key = item_key(data)
            except Exception as exc:
                raise ParseError(f"item_key failed on {type(item).__name__} item: {exc!r}") from exc
            row = _record_row(key, data, source, page.url, is_item=True)
            records[row.id] = row
        else:
            raise ParseError(
                f"parse yielded {type(item).__name__}: yield Record(...), a dict (with "
                "item_key set on the spider), page.follow(...), Request(...) or a URL string"
            )
    rows.records = list(records.values())
    rows.links_offsite = links.outside - outside
    return rows


def _item_data(item: Any) -> dict[str, Any] | None:
    """A plain item (dict, dataclass, attrs or pydantic model) as a dict, or None.

    itemadapter is imported on the first item that is not a Record: it imports Scrapy
    when Scrapy is installed (0.4 s and 30 MB that a crawl yielding Records never needs).
    """
    if isinstance(item, dict):
        return item
    from itemadapter import ItemAdapter

    return ItemAdapter(item).asdict() if ItemAdapter.is_item(item) else None


def _record_row(key: Any, data: Any, source: str, url: str, *, is_item: bool = False) -> RecordRow:
    if key is None or key == "":
        raise ParseError(
            "record with an empty key: the key selector matched nothing? Every record "
            "needs a natural key (a SKU, a slug)."
        )
    if not isinstance(key, str | int) or isinstance(key, bool):
        raise ParseError(
            f"a record's key must be a string or an integer, not {type(key).__name__} "
            f"({str(key)[:100]}): join its parts into one string"
        )
    key = str(key)
    try:
        row = RecordRow.build(
            id=record_id(source, key),
            source=source,
            key=key,
            url=url,
            data=data,
            is_item=is_item,
        )
    except (TypeError, ValueError) as exc:
        hint = ""
        if "Out of range float" in str(exc):
            hint = " (NaN or Infinity: store None or a string instead)"
        elif "type File" in str(exc):
            hint = (
                " (a File made outside this page's callback: call page.download(url) in "
                "the callback that yields it)"
            )
        raise ParseError(f"record {key!r}: data is not JSON: {exc}{hint}") from exc
    # A field of crashsafe's own name shows in the JSON (looked for there first: cheap).
    if isinstance(data, dict) and _META_KEY in row.data_json:
        taken = next((str(k) for k in data if str(k).startswith(META_PREFIX)), None)
        if taken is not None:
            raise ParseError(
                f"record {key!r} has a field {taken!r}: fields named {META_PREFIX}* are "
                "crashsafe's own (exports add them); rename it"
            )
    return row
