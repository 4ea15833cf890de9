"""What a crawl sends beside URLs, as a browser session would: cookies, headers, proxies,
basic auth.

- Cookies: one jar per worker (aiohttp's). The cookies a page's responses set are stored
  with that page's done mark (:func:`cookie_rows`), and a crawl that starts replays the
  stored ones into its jar, so a restarted crawl is still logged in. Several workers: a
  worker that leases a page after another one stored cookies loads them first
  (:class:`CookieSync`), so a page found by a login page is fetched logged in, whichever
  worker fetched the login page.
- Proxies: ``meta["proxy"]``, else the ``proxy`` setting, else the standard environment
  variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``), read once per crawl.
- Basic auth: ``http_user``/``http_pass``, sent only to ``http_auth_domain`` (default: the
  start URLs' hosts), hop by hop, so a redirect elsewhere does not carry them along.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import urllib.request
from collections.abc import Awaitable, Callable, Iterable, Sequence
from http.cookies import CookieError, Morsel, SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from crashsafe.crawl.fetch import GET, Send
from crashsafe.crawl.requests import Request, check_proxy
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.store import CookieRow, StoredCookies

__all__ = ["CookieJar", "CookieSync", "SendBuilder", "cookie_rows", "too_wide"]


def default_path(url: str) -> str:
    """A cookie's path when it names none (RFC 6265 5.1.4): the request path's directory."""
    path = urlsplit(url).path
    if not path.startswith("/") or path.count("/") == 1:
        return "/"
    return path[: path.rindex("/")]


@functools.cache
def _public_suffixes() -> Any:
    from publicsuffixlist import PublicSuffixList  # (its list is bundled: no network)

    return PublicSuffixList()


def too_wide(domain: str, host: str) -> bool:
    """Whether a cookie's ``Domain`` attribute names a public suffix (``com``, ``co.uk``,
    ``github.io``, a bare ``test``) other than the host itself: a cookie any site under it
    would be sent (RFC 6265 5.3 step 5), refused as browsers refuse it."""
    domain = domain.lstrip(".").lower()
    if not domain or domain == host.lower():
        return False
    return bool(_public_suffixes().is_public(domain))


def accepted(morsel: Morsel[str], host: str) -> bool:
    return not (morsel["domain"] and too_wide(morsel["domain"], host))


def _parsed(url: str, header: str) -> list[tuple[tuple[str, str, str], Morsel[str]]]:
    """The cookies of one ``Set-Cookie`` value, each with the key the jar files it
    under (domain, path, name); nothing for a value that does not parse, nor for a
    cookie whose domain is a public suffix (:func:`too_wide`)."""
    cookie: SimpleCookie = SimpleCookie()
    try:
        cookie.load(header)
    except CookieError:
        return []
    host = (urlsplit(url).hostname or "").lower()
    return [
        (((m["domain"] or host).lstrip(".").lower(), m["path"] or default_path(url), name), m)
        for name, m in cookie.items()
        if accepted(m, host)
    ]


class CookieJar(aiohttp.CookieJar):
    """aiohttp's jar (cookies of IP hosts kept too, as Scrapy does), refusing cookies
    whose ``Domain`` is a public suffix: ``Set-Cookie: wide=1; Domain=test`` would be sent
    to every host under ``test``."""

    def __init__(self) -> None:
        super().__init__(unsafe=True)

    def update_cookies(self, cookies: Any, response_url: URL = URL()) -> None:  # noqa: B008
        host = response_url.raw_host or ""
        items = cookies.items() if hasattr(cookies, "items") else cookies
        kept = [
            (name, value)
            for name, value in items
            if not isinstance(value, Morsel) or accepted(value, host)
        ]
        super().update_cookies(kept, response_url)

    def update_cookies_from_headers(self, headers: Sequence[str], response_url: URL) -> None:
        """The path a session takes (aiohttp >= 3.12): raw ``Set-Cookie`` values, parsed
        by aiohttp's own parser, then checked as :meth:`update_cookies` checks them."""
        if not headers:
            return
        try:
            from aiohttp._cookie_helpers import parse_set_cookie_headers
        except ImportError:  # an aiohttp without this path calls update_cookies instead
            return super().update_cookies_from_headers(headers, response_url)
        self.update_cookies(parse_set_cookie_headers(headers), response_url)


def cookie_rows(set_cookies: Iterable[tuple[str, str]]) -> list[CookieRow]:
    """The rows to store for ``(URL, Set-Cookie value)`` pairs; values that do not parse
    as a cookie are left out (the jar ignores them too)."""
    return [
        CookieRow(domain, path, name, url, header)
        for url, header in set_cookies
        for (domain, path, name), _ in _parsed(url, header)
    ]


class CookieSync:
    """One worker's cookie jar, kept up to date with the cookies the crawl stored.

    When the crawl starts, the stored cookies are replayed into the jar. Later, a lease
    granted when the stored cookies had a newer version than the jar's (another worker
    committed a login page, say) makes the worker load them before that page is fetched;
    cookies this worker received itself are kept as its own responses set them.
    """

    def __init__(
        self,
        jar: aiohttp.abc.AbstractCookieJar,
        load: Callable[[], Awaitable[StoredCookies]],
    ) -> None:
        self.jar = jar
        self._load = load
        self.version = -1  # of what was loaded; -1: nothing yet
        self._own: set[tuple[str, str, str]] = set()
        self._lock = asyncio.Lock()

    def received(self, set_cookies: Iterable[tuple[str, str]]) -> None:
        """Note cookies this worker's own responses set (the jar has them already)."""
        for url, header in set_cookies:
            self._own.update(key for key, _ in _parsed(url, header))

    async def catch_up(self, version: int) -> None:
        """Load the stored cookies if they are newer than ``version`` says the jar is."""
        if version <= self.version:
            return
        async with self._lock:
            if version <= self.version:
                return
            stored = await self._load()
            for url, header in stored.rows:
                for key, morsel in _parsed(url, header):
                    if key not in self._own:
                        self.jar.update_cookies({morsel.key: morsel}, URL(url))
            self.version = max(self.version, stored.version)


#: hosts whose NO_PROXY answer is kept (computed again when met after a clear)
BYPASS_KEPT = 10_000


class SendBuilder:
    """Turns a stored :class:`Request` into what the fetch sends (:class:`Send`)."""

    def __init__(
        self, settings: CrawlSettings, start_origins: Iterable[tuple[str, int | None]]
    ) -> None:
        self.proxy = settings.proxy
        self._env = {} if settings.proxy else urllib.request.getproxies_environment()
        self._bypass: dict[str, bool] = {}
        self._auth: str | None = None  # the Authorization header's value
        if settings.http_user is not None or settings.http_pass is not None:
            pair = f"{settings.http_user or ''}:{settings.http_pass or ''}".encode()
            self._auth = "Basic " + base64.b64encode(pair).decode("ascii")
        # By default the start URLs' origins (host and port); a domain given covers its
        # subdomains, on any port, as Scrapy's http_auth_domain does.
        self._auth_origins = {(h.lower(), p) for h, p in start_origins}
        domain = settings.http_auth_domain
        self._auth_domain = domain.lower().lstrip(".") if domain else None
        if settings.proxy is not None:
            check_proxy(settings.proxy, "the proxy setting")

    def proxy_for(self, request: Request) -> str | None:
        meta = request.meta or {}
        if "proxy" in meta:  # None in meta: no proxy for this request, as in Scrapy
            value = meta["proxy"]
            return check_proxy(value, 'meta["proxy"]') if value else None
        if self.proxy or not self._env:
            return self.proxy
        url = urlsplit(request.url)
        proxy = self._env.get(url.scheme)
        if proxy is None:
            return None
        host = url.hostname or ""
        bypass = self._bypass.get(host)
        if bypass is None:
            if len(self._bypass) >= BYPASS_KEPT:  # (a broad crawl: millions of hosts)
                self._bypass.clear()
            bypass = self._bypass[host] = bool(
                urllib.request.proxy_bypass_environment(host, self._env)  # type: ignore[attr-defined]
            )
        return None if bypass else proxy

    def auth_for(self, host: str, port: int | None) -> str | None:
        if self._auth is None:
            return None
        host, domain = host.lower(), self._auth_domain
        if domain is None:
            return self._auth if (host, port) in self._auth_origins else None
        if domain == "*" or host == domain or host.endswith("." + domain):
            return self._auth
        return None

    def send(self, request: Request) -> Send:
        if (
            request.is_plain
            and not (request.headers or request.cookies or request.meta)
            and self._auth is None
            and self.proxy is None
            and not self._env
        ):
            return GET  # most pages: nothing to build
        body = request.body_bytes
        return Send(
            method=request.method.upper(),
            headers=request.headers,
            body=body or None,
            cookies=request.cookies,
            proxy=self.proxy_for(request),
            auth=self.auth_for if self._auth is not None else None,
        )

    def proxy_endpoints(self) -> list[tuple[str, int]]:
        """The hosts and ports of the proxies this crawl's settings or environment name:
        the address guard lets the crawl connect to them, as proxies only."""
        env = [p for scheme, p in self._env.items() if scheme != "no"]
        found = []
        for proxy in (self.proxy, *env):
            if not proxy:
                continue
            url = URL(proxy if "://" in proxy else f"http://{proxy}")
            if url.raw_host and url.port:
                found.append((url.raw_host, url.port))
        return found
