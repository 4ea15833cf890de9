"""What a crawl sends beside URLs, as a browser session would: cookies, headers, proxies,
basic auth.

- Cookies: one jar per crawl (aiohttp's). The cookies a page's responses set are stored
  with that page's done mark (:func:`cookie_rows`), and a crawl that starts replays the
  stored ones into its jar (:func:`load_cookies`), so a restarted crawl is still logged
  in. Several workers: each loads the jar when it starts; a cookie one of them receives
  later reaches the others when they restart (see docs/scrapy.md).
- Proxies: ``meta["proxy"]``, else the ``proxy`` setting, else the standard environment
  variables (``HTTP_PROXY``, ``HTTPS_PROXY``, ``NO_PROXY``), read once per crawl.
- Basic auth: ``http_user``/``http_pass``, sent only to ``http_auth_domain`` (default: the
  start URLs' hosts), hop by hop, so a redirect elsewhere does not carry them along.
"""

from __future__ import annotations

import base64
import urllib.request
from collections.abc import Iterable, Sequence
from http.cookies import CookieError, SimpleCookie
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from crashsafe.crawl.fetch import Send
from crashsafe.crawl.requests import Request
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.store import CookieRow

__all__ = ["SendBuilder", "cookie_rows", "load_cookies"]


def cookie_rows(set_cookies: Iterable[tuple[str, str]]) -> list[CookieRow]:
    """The rows to store for ``(URL, Set-Cookie value)`` pairs; values that do not parse
    as a cookie are left out (the jar ignores them too)."""
    rows = []
    for url, header in set_cookies:
        parsed = SimpleCookie()
        try:
            parsed.load(header)
        except CookieError:
            continue
        host = (urlsplit(url).hostname or "").lower()
        for name, morsel in parsed.items():
            domain = (morsel["domain"] or host).lstrip(".").lower()
            rows.append(CookieRow(domain, morsel["path"] or "/", name, url, header))
    return rows


def load_cookies(jar: aiohttp.abc.AbstractCookieJar, stored: Sequence[tuple[str, str]]) -> int:
    """Replay stored ``(URL, Set-Cookie value)`` pairs into ``jar``, in order: the jar then
    holds what it held when those pages committed (expired cookies drop out)."""
    for url, header in stored:
        parsed = SimpleCookie()
        try:
            parsed.load(header)
        except CookieError:
            continue
        jar.update_cookies(parsed, URL(url))
    return len(stored)


class SendBuilder:
    """Turns a stored :class:`Request` into what the fetch sends (:class:`Send`)."""

    def __init__(self, settings: CrawlSettings, start_hosts: Iterable[str]) -> None:
        self.proxy = settings.proxy
        self._env = {} if settings.proxy else urllib.request.getproxies_environment()
        self._bypass: dict[str, bool] = {}
        self._auth: str | None = None  # the Authorization header's value
        if settings.http_user is not None or settings.http_pass is not None:
            pair = f"{settings.http_user or ''}:{settings.http_pass or ''}".encode()
            self._auth = "Basic " + base64.b64encode(pair).decode("ascii")
        domain = settings.http_auth_domain
        self._auth_domains = (
            tuple(h.lower() for h in start_hosts) if domain is None else (domain.lower(),)
        )

    def proxy_for(self, request: Request) -> str | None:
        meta = request.meta or {}
        if "proxy" in meta:  # None in meta: no proxy for this request, as in Scrapy
            value = meta["proxy"]
            return str(value) if value else None
        if self.proxy or not self._env:
            return self.proxy
        url = urlsplit(request.url)
        proxy = self._env.get(url.scheme)
        if proxy is None:
            return None
        host = url.hostname or ""
        bypass = self._bypass.get(host)
        if bypass is None:
            bypass = self._bypass[host] = bool(
                urllib.request.proxy_bypass_environment(host, self._env)  # type: ignore[attr-defined]
            )
        return None if bypass else proxy

    def auth_for(self, host: str) -> str | None:
        if self._auth is None:
            return None
        host = host.lower()
        for domain in self._auth_domains:
            if domain == "*" or host == domain or host.endswith("." + domain):
                return self._auth
        return None

    def send(self, request: Request) -> Send:
        body = request.body_bytes
        return Send(
            method=request.method.upper(),
            headers=request.headers,
            body=body or None,
            cookies=request.cookies,
            proxy=self.proxy_for(request),
            auth=self.auth_for if self._auth is not None else None,
        )

    def proxy_hosts(self) -> list[str]:
        """The hosts of the proxies this crawl may use (the address guard lets the crawl
        connect to them)."""
        env = [p for scheme, p in self._env.items() if scheme != "no"]
        hosts = [urlsplit(p).hostname for p in (self.proxy, *env) if p]
        return [h for h in hosts if h]
