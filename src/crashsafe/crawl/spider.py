"""The public spider API: ``Spider``, ``Page``, ``Record``, ``Request`` and ``Link``.

Everything ``parse`` yields for a page (records, items, requests) is committed in one
transaction with that page's ``done`` mark, or not at all.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urljoin, urlsplit

from crashsafe.crawl.requests import BadRequest, Request, callback_name, checked
from crashsafe.crawl.revisits import CHANGEFREQ
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.sitemaps import (
    SitemapEntry,
    lastmod_time,
    read_sitemap,
    sitemaps_in_robots,
)
from crashsafe.effects.files import File
from crashsafe.errors import ConfigError, SpiderError

if TYPE_CHECKING:
    from parsel import Selector, SelectorList

__all__ = [
    "MAX_SITEMAP_DEPTH",
    "SITEMAP_CALLBACK",
    "Link",
    "Page",
    "Record",
    "Request",
    "Spider",
    "callback_name",
]

#: The spider method that reads sitemaps (``Spider.sitemap_urls``).
SITEMAP_CALLBACK = "_parse_sitemap"
#: Sitemap indexes followed from a sitemap URL, one inside another, at most.
MAX_SITEMAP_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Record:
    """One item extracted from a page.

    Args:
        key: the natural key within the source (a SKU, an article slug); the record id
            is ``record_id(source, key)``, so the same key always lands on the same row.
        data: JSON-serialisable content. Changing it bumps the stored version.
        source: defaults to the spider's name.
    """

    key: str | int | None
    data: Any = field(default_factory=dict)
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Link:
    """A URL to crawl, optionally handled by another spider method than ``parse``.

    Higher ``priority`` is leased first (equal priorities: in the order found). Give
    pagination a higher priority than the items it lists, and the crawl keeps discovering
    work while it fetches the items. ``callback`` is a method's name or the method
    itself (``callback=self.parse_item``); the frontier keeps its name.
    """

    url: str
    callback: str | Callable[..., Any] | None = None
    priority: int = 0


_parsers = threading.local()
_PLAIN_PATH = re.compile(r"/(?!/)[^?#;\\\s]*")


def _parse_html_utf8(body: bytes) -> Any:
    """The lxml tree of an HTML body known to be UTF-8, parsed from its bytes by a parser
    reused across pages (parsel builds a new one per page); None when parsel's own path
    should handle it."""
    import lxml.etree
    import lxml.html

    body = body.replace(b"\x00", b"").strip()
    if not body:
        return None
    parser = getattr(_parsers, "html", None)
    if parser is None:
        parser = _parsers.html = lxml.html.HTMLParser(recover=True, encoding="utf-8")
    try:
        return lxml.etree.fromstring(body, parser=parser)
    except lxml.etree.XMLSyntaxError:
        return None


class Page:
    """A fetched response, as ``parse`` sees it."""

    def __init__(
        self,
        *,
        url: str,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        depth: int = 0,
        request_url: str | None = None,
        request: Request | None = None,
    ) -> None:
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body
        self.depth = depth
        self.request = request or Request(request_url or url)
        self.request_url = request_url or self.request.url
        self._utf8 = False  # set by ``text`` when the body decoded as UTF-8
        self._joined: dict[str, str] = {}  # href -> URL, for urljoin
        #: The Playwright page of a rendered page (``docs/rendering.md``), open while the
        #: callback runs: wait, click, scroll, then ``await page.reread()``. None when
        #: the page was fetched only.
        self.browser: Any = None

    async def reread(self) -> None:
        """Read the browser's DOM again (after clicks or scrolling through
        ``page.browser``): ``text``, ``css()`` and ``xpath()`` see it from then on."""
        if self.browser is None:
            raise ConfigError(f"page.reread() on {self.url}: the page was not rendered")
        self.body = (await self.browser.content()).encode("utf-8")
        self._utf8 = False
        for cached in ("text", "selector", "base_url", "_origin"):
            self.__dict__.pop(cached, None)
        self._joined.clear()

    @property
    def meta(self) -> Mapping[str, Any]:
        """The ``meta`` of the request this page answers (as Scrapy's ``response.meta``)."""
        return self.request.meta or {}

    @property
    def cb_kwargs(self) -> Mapping[str, Any]:
        """The ``cb_kwargs`` of the request this page answers (also passed to the
        callback as keyword arguments)."""
        return self.request.cb_kwargs or {}

    def __repr__(self) -> str:
        return f"<Page {self.status} {self.url}>"

    @cached_property
    def text(self) -> str:
        """The body decoded (HTTP charset, then BOM/meta, then UTF-8)."""
        content_type = self.headers.get("Content-Type") or ""
        if content_type.lower().replace(" ", "").endswith("charset=utf-8"):
            try:  # the common case, without w3lib's detection
                text = self.body.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                self._utf8 = True
                return text
        from w3lib.encoding import html_to_unicode

        _, text = html_to_unicode(content_type or None, self.body)
        return str(text)

    @cached_property
    def selector(self) -> Selector:
        from parsel import Selector  # (imported here: the first request need not wait)

        content_type = (self.headers.get("Content-Type") or "").lower()
        kind = "html" if "html" in content_type else "xml" if "xml" in content_type else None
        text = self.text
        if kind == "html" and self._utf8 and (root := _parse_html_utf8(self.body)) is not None:
            return Selector(root=root, type="html")
        return Selector(text=text, type=kind)

    @cached_property
    def base_url(self) -> str:
        from w3lib.html import get_base_url

        try:
            return str(get_base_url(self.text[:4096], self.url))
        except ValueError:  # a <base href> that cannot be parsed: ignore it
            return self.url

    def css(self, query: str) -> SelectorList[Selector]:
        return self.selector.css(query)

    def xpath(self, query: str, **kwargs: Any) -> SelectorList[Selector]:
        return self.selector.xpath(query, **kwargs)

    def json(self) -> Any:
        import json

        return json.loads(self.text)

    @cached_property
    def _origin(self) -> str:
        scheme, netloc, *_ = urlsplit(self.base_url)
        return f"{scheme}://{netloc}" if scheme and netloc else ""

    def urljoin(self, href: str) -> str:
        """``href`` resolved against the page's base URL (``<base href>`` or the URL).

        A malformed ``href`` (``http://[::1``) comes back as it is: the crawl skips and
        counts it when it is followed, instead of failing the page.
        """
        joined = self._joined.get(href)
        if joined is not None:  # (a Request of page.follow is joined again when stored)
            return joined
        bare = href.strip()
        # The common case, a plain absolute path (no dot segments, query, fragment or
        # params, which urljoin would normalise), is the origin + href.
        if _PLAIN_PATH.fullmatch(bare) and "/." not in bare and self._origin:
            joined = self._origin + bare
        else:
            try:
                joined = urljoin(self.base_url, bare)
            except ValueError:
                return bare
        # A joined URL joins to itself: remembered too, so joining it again costs nothing.
        self._joined[href] = self._joined[joined] = joined
        return joined

    def download(self, url: str | None) -> File:
        """A file to download before this page commits: put it in a record's data (it
        becomes a reference to the stored file: ``url``, ``sha256``, ``path``, ``size``,
        ``content_type``) or yield it on its own. See ``effects/files.py``."""
        if not isinstance(url, str) or not url.strip():
            raise ValueError(
                f"page.download({url!r}) on {self.url}: give a URL (did the selector match "
                "nothing?)"
            )
        return File(self.urljoin(url))

    def follow(
        self,
        href: str | Any,
        *,
        callback: str | Callable[..., Any] | None = None,
        priority: int = 0,
        **request: Any,
    ) -> Request:
        """A :class:`Request` for ``href`` resolved against this page, to be parsed by the
        spider method ``callback`` (its name, or the method itself:
        ``callback=self.parse_item``). Other keywords are the Request's (``method``,
        ``headers``, ``body``, ``cookies``, ``meta``, ``cb_kwargs``, ``dont_filter``).

        ``href`` may be a selector, as in Scrapy: an ``<a>`` or ``<link>`` element (its
        ``href``), an attribute or text selection (its value), or a SelectorList of one.
        """
        return Request(self.urljoin(_href(href)), callback=callback, priority=priority, **request)

    def follow_all(
        self,
        hrefs: Iterable[str] | None = None,
        *,
        css: str | None = None,
        xpath: str | None = None,
        callback: str | Callable[..., Any] | None = None,
        priority: int = 0,
        **request: Any,
    ) -> Iterator[Request]:
        """Requests for every href given, or selected by ``css``/``xpath`` (e.g.
        ``a::attr(href)``); keywords as :meth:`follow`'s.

        A selector that matches elements rather than attributes uses their ``href``.
        """
        found: Iterable[Any]
        if hrefs is None:
            if css is None and xpath is None:
                raise ConfigError("follow_all needs hrefs, css= or xpath=")
            found = self.css(css) if css is not None else self.xpath(xpath or "")
        else:
            found = hrefs  # strings, selectors, or a SelectorList
        for item in found:
            href = _href(item, strict=False)
            if href and not href.startswith(("javascript:", "mailto:", "tel:", "#")):
                yield self.follow(href, callback=callback, priority=priority, **request)


def _href(link: Any, *, strict: bool = True) -> str:
    """The URL text of what ``follow`` was given: a string as it is; an element's
    ``href`` (``<a>``, ``<link>``, ``<area>``); an attribute's or text's value; a
    SelectorList of exactly one of these. ``""`` for an element without one (skipped by
    ``follow_all``; ``follow`` raises ConfigError)."""
    if isinstance(link, str):
        return link
    from parsel import Selector, SelectorList

    if isinstance(link, SelectorList):
        if len(link) != 1:
            raise ConfigError(
                f"follow() takes one link; this SelectorList has {len(link)}: use "
                "follow_all(selectors) for each of them"
            )
        link = link[0]
    if isinstance(link, Selector):
        root = link.root
        if hasattr(root, "get"):  # an element
            value = root.get("href")
            if value is None and strict:
                raise ConfigError(f"follow(): <{root.tag}> has no href attribute")
            return str(value or "")
        return str(link.get() or "")
    raise ConfigError(f"follow() takes a URL string or a selector, not {type(link).__name__}")


class Spider:
    """Subclass this: set ``name`` and ``start_urls``, write ``parse``.

    Any :class:`~crashsafe.crawl.settings.CrawlSettings` field may be set as a class
    attribute (``concurrency = 8``); the CLI's ``--set`` overrides it.
    """

    name: ClassVar[str] = ""
    start_urls: ClassVar[list[str]] = []
    #: How the key of a plain item (a dict, a dataclass, an attrs or pydantic model) is
    #: found: a field name (``"sku"``) or a function of the item as a dict. Without it,
    #: yield :class:`Record` objects.
    item_key: ClassVar[str | Callable[[Any], Any] | None] = None

    #: Sitemaps to crawl (``sitemap.xml``, ``.xml.gz``, a sitemap index, a text sitemap,
    #: or a ``robots.txt`` whose ``Sitemap:`` lines are followed), as Scrapy's
    #: SitemapSpider: each URL listed is requested with the callback of the first
    #: ``sitemap_rules`` pattern (a regex searched in the URL) that matches it; URLs that
    #: match none are left out. An index's sitemaps are followed when they match a
    #: ``sitemap_follow`` pattern. ``sitemap_filter`` sees every entry (``loc``,
    #: ``lastmod``) first.
    sitemap_urls: ClassVar[list[str]] = []
    sitemap_rules: ClassVar[list[tuple[str, str | Callable[..., Any]]]] = [("", "parse")]
    sitemap_follow: ClassVar[list[str]] = [""]
    sitemap_alternate_links: ClassVar[bool] = False

    def __init__(self, **arguments: Any) -> None:
        """``arguments`` become attributes, as Scrapy's spider arguments do
        (``crashsafe crawl shop.py -a category=lamps`` sets ``self.category``)."""
        for name, value in arguments.items():
            if not name.isidentifier() or name.startswith("_"):
                raise ConfigError(f"spider argument {name!r}: use a name like category=lamps")
            setattr(self, name, value)

    @property
    def logger(self) -> logging.Logger:
        """The spider's logger, named after it (as Scrapy's): ``self.logger.info(...)``
        goes where the crawl's lines go, at the level ``--log-level`` sets."""
        from crashsafe.logs import spider_logger

        return spider_logger(self.name or type(self).__name__)

    def start_requests(self) -> Iterable[Request | str]:
        """The requests the crawl starts from: by default a GET of every ``start_urls``
        and ``sitemap_urls`` entry. Override it to start with a POST, headers, cookies or
        ``meta``. Start requests are added on every run and are keyed like any other
        request, so a restart never adds them twice."""
        requests = [Request(url) for url in self.start_urls]
        requests += [Request(url, callback=SITEMAP_CALLBACK) for url in self.sitemap_urls]
        return requests

    def sitemap_filter(self, entries: Iterable[SitemapEntry]) -> Iterable[SitemapEntry]:
        """Override to drop sitemap entries, e.g. by ``entry.lastmod`` (see
        :func:`crashsafe.crawl.sitemaps.lastmod_time`); keeps them all by default."""
        return entries

    def _parse_sitemap(self, page: Page) -> Iterator[Request]:
        """The callback of sitemap URLs (``sitemap_urls`` and what they lead to)."""
        if urlsplit(page.url).path.endswith("/robots.txt"):
            for url in sitemaps_in_robots(page.text):
                yield Request(url, callback=SITEMAP_CALLBACK)
            return
        sitemap = read_sitemap(page.body)
        entries = self.sitemap_filter(sitemap.entries)
        if sitemap.kind == "sitemapindex":
            # Indexes of indexes are not in the protocol but happen; a chain of them ends
            # at MAX_SITEMAP_DEPTH (an index that lists itself is a known URL already).
            depth = int(page.meta.get("sitemap_depth", 0)) + 1
            if depth > MAX_SITEMAP_DEPTH:
                return
            follow = [re.compile(p) for p in self.sitemap_follow]
            for entry in entries:
                if any(p.search(entry.loc) for p in follow):
                    yield Request(
                        entry.loc, callback=SITEMAP_CALLBACK, meta={"sitemap_depth": depth}
                    )
            return
        rules = [(re.compile(p), callback) for p, callback in self.sitemap_rules]
        for entry in entries:
            urls = [entry.loc, *entry.alternates] if self.sitemap_alternate_links else [entry.loc]
            # what a continuous crawl goes by (crawl/revisits.py): how often the page
            # changes, as a first guess, and when it last did
            hints: dict[str, Any] = {}
            if entry.changefreq in CHANGEFREQ:
                hints["changefreq"] = entry.changefreq
            if (changed := lastmod_time(entry.lastmod)) is not None:
                hints["lastmod"] = changed
            for url in urls:
                callback = next((cb for p, cb in rules if p.search(url)), None)
                if callback is not None:
                    yield Request(url, callback=callback, meta=hints or None)

    def parse(self, page: Page) -> Iterable[Any] | AsyncIterator[Any] | None:
        raise NotImplementedError(f"{type(self).__name__} must define parse(self, page)")

    @classmethod
    def crawl_settings(cls, **overrides: Any) -> CrawlSettings:
        """The defaults, updated by this class's attributes, then by ``overrides``."""
        names = CrawlSettings.names()
        from_class = {n: getattr(cls, n) for n in names if hasattr(cls, n)}
        for key in (
            "allowed_domains",
            "allowed_download_domains",
            "secret_headers",
            "allowed_addresses",
            "strip_query_params",
            "handle_statuses",
            "browser_block",
            "browser_allowed_domains",
        ):
            if from_class.get(key) is not None:
                from_class[key] = tuple(from_class[key])
        headers = from_class.get("default_headers")
        if isinstance(headers, Mapping):
            from_class["default_headers"] = tuple((str(k), str(v)) for k, v in headers.items())
        return (
            CrawlSettings()
            .replace(**from_class)
            .replace(**_custom_settings(cls))
            .replace(**overrides)
        )


def _custom_settings(cls: type[Spider]) -> dict[str, Any]:
    """A spider's ``custom_settings`` (Scrapy's habit), Scrapy's names translated."""
    from crashsafe.crawl.scrapy_names import from_scrapy

    custom = getattr(cls, "custom_settings", None) or {}
    if not isinstance(custom, Mapping):
        raise ConfigError(f"{cls.__name__}.custom_settings must be a dict")
    settings: dict[str, Any] = {}
    for name, value in custom.items():
        if isinstance(value, list | tuple | set):
            text = ",".join(map(str, value))
        else:
            text = "none" if value is None else str(value)
        ours, text = from_scrapy(str(name), text)
        settings[ours] = CrawlSettings.parse_value(ours, text)
    return settings


def start_requests_of(spider: Spider, urls: Sequence[str] | None = None) -> list[Request]:
    """The requests a run starts from: GETs of ``urls`` when given (``--start-url``),
    else the spider's ``start_requests()``, each checked (a ConfigError names the one
    that cannot be sent or stored)."""
    if urls is not None:
        return [Request(u) for u in urls]
    name = f"{type(spider).__name__}.start_requests()"
    try:
        found = list(spider.start_requests() or ())
    except Exception as exc:
        raise SpiderError(f"{name} raised {type(exc).__name__}: {exc}") from exc
    requests = []
    for item in found:
        if isinstance(item, str):
            item = Request(item)
        if not isinstance(item, Request):
            raise ConfigError(
                f"{name} gave {type(item).__name__}: give Request(...) objects or URLs"
            )
        try:
            requests.append(checked(item))
        except BadRequest as exc:
            raise ConfigError(f"{name} gave a request for {item.url!r}: {exc}") from None
    return requests
