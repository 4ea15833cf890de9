"""Rendering a fetched page in Chromium, and deciding which pages need it.

A page is fetched as every page is (robots.txt, host slots, the allow-list, the address
guard, cookies, proxy), then, when it needs rendering, that very response is handed to
the browser as the page's document: the page is downloaded once. Every further request
the page makes (scripts, data, frames) is intercepted and sent by the crawl's own HTTP
session, through the same allow decision (``browser_allowed_domains``, else the crawl's
allow-list) and address guard a fetched page passes, or refused: the browser itself never
opens a connection. Cookies go both ways: the crawl's jar is given to the browser before
the page loads, and what the page set (responses' ``Set-Cookie``, ``document.cookie``)
comes back to the jar and is stored with the page's done mark.

``"auto"`` mode: a page is fetched and checked for ``render_when_missing``; only when the
selector matches nothing is it rendered. Which way each URL pattern (:func:`pattern_of`)
went is counted in the store with the page's commit, and a pattern whose pages only ever
needed the browser is rendered straight away (its HTML is not checked first),
also after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from crashsafe.crawl.addresses import AddressGuard, AddressRefused
from crashsafe.crawl.allow import AllowList, BadLink, check_raw, host_and_port
from crashsafe.crawl.browser import BrowserPool, Lent, find_chromium, playwright_api
from crashsafe.crawl.fetch import (
    PermanentFetchError,
    Response,
    Send,
    TransientFetchError,
    fetch,
)
from crashsafe.crawl.requests import Request
from crashsafe.crawl.settings import CrawlSettings

logger = logging.getLogger("crashsafe.crawl")

#: Response headers not handed to the browser: the body it gets is already decoded and
#: whole.
_HOP = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection"})
#: Request headers the crawl's session sets itself.
_OWN = frozenset({"host", "content-length", "connection", "accept-encoding", "user-agent"})
_DIGITS = re.compile(r"\d")


def pattern_of(url: str) -> str:
    """The URL pattern auto mode learns by: the origin, the first path segment, and
    whether more follow (``http://shop/product/*``; a segment with digits is ``*``)."""
    parts = urlsplit(url)
    segments = [s for s in parts.path.split("/") if s]
    first = "" if not segments else ("*" if _DIGITS.search(segments[0]) else segments[0])
    more = "/*" if len(segments) > 1 else ""
    return f"{parts.scheme}://{parts.netloc}/{first}{more}"


class RenderModes:
    """Auto mode's memory: per URL pattern, pages that were fine as fetched (HTTP) and
    pages that needed the browser, as committed (loaded from the store at start)."""

    def __init__(self, counts: Mapping[str, tuple[int, int]] | None = None) -> None:
        self.counts: dict[str, list[int]] = {p: [h, b] for p, (h, b) in (counts or {}).items()}

    def straight_to_browser(self, pattern: str) -> bool:
        """Whether pages of ``pattern`` go to the browser without a look at their HTML:
        once some of its pages needed the browser and none was fine as fetched. (A
        pattern with both kinds has each page checked: a check costs a parse, a
        rendering far more.)"""
        http, browser = self.counts.get(pattern, (0, 0))
        return browser > 0 and http == 0

    def saw(self, pattern: str, browser: bool) -> None:
        self.counts.setdefault(pattern, [0, 0])[int(browser)] += 1


class RenderFailed(TransientFetchError):
    """The page could not be rendered (its budget ran out, the browser crashed): retried
    with backoff, an attempt counted."""


@dataclass(slots=True)
class Rendered:
    """A page as the browser left it: the response to parse (its body the rendered
    DOM), and the Playwright page, open until :meth:`close`."""

    response: Response
    page: Any
    close: Callable[[], Awaitable[None]]
    refused: int = 0  # requests of the page refused (allow-list, address guard)
    blocked: int = 0  # requests of a blocked resource type


class Renderer:
    """Renders fetched pages of one crawl worker."""

    def __init__(
        self,
        *,
        settings: CrawlSettings,
        session: aiohttp.ClientSession,
        guard: AddressGuard | None,
        allowed: AllowList | None,
        send_for: Callable[[Request], Send],
        pool: BrowserPool | None = None,
    ) -> None:
        self.settings = settings
        self.session = session
        self.guard = guard
        self.allowed = allowed
        self.send_for = send_for
        self._pool = pool
        self.blocked_types = frozenset(settings.browser_block)
        self.rendered = 0
        self._states: dict[Any, _PageState] = {}  # page -> what it is rendering now

    def check(self) -> None:
        """ConfigError, in one line, if pages cannot be rendered here (no Chromium, no
        Playwright)."""
        find_chromium(self.settings.browser_executable)
        playwright_api()

    @property
    def pool(self) -> BrowserPool:
        if self._pool is None:  # (the first page that needs the browser starts it)
            self._pool = BrowserPool(self.settings, user_agent=self.settings.user_agent)
        return self._pool

    def _allowed(self, url: str) -> str:
        """``url`` if a rendered page may request it, else BadLink saying why (the
        redirects of its requests are checked so too)."""
        if not url.startswith(("http://", "https://")):
            raise BadLink("not an http(s) URL")
        check_raw(url)
        host, port = host_and_port(url)
        if self.allowed is not None and not self.allowed.allows(host, port):
            raise BadLink(
                f"{host}:{port} is outside browser_allowed_domains (the crawl's "
                "allowed_domains unless set)"
            )
        return url

    async def render(self, resp: Response, request: Request) -> Rendered:
        """``resp`` rendered in the browser. Raises RenderFailed when the page does not
        load, settle and give its DOM within ``render_timeout``, or the browser fails."""
        budget = self.settings.render_timeout
        deadline = time.monotonic() + budget
        stack = contextlib.AsyncExitStack()
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(resp.url))
        state = _PageState(resp)
        lent: Lent | None = None
        try:
            async with asyncio.timeout(budget):
                lent = await stack.enter_async_context(self.pool.page(origin))
                page, context = lent.page, lent.context
                self._states[page] = state
                stack.callback(self._states.pop, page, None)
                await self._give_cookies(context, resp.url)
                if lent.fresh:
                    await page.route("**/*", lambda route: self._route_of(page, route))
                await page.goto(resp.url, wait_until="load")
                wait_for = self.settings.render_wait_for or self.settings.render_when_missing
                if wait_for:
                    left = max(0.0, deadline - time.monotonic() - 0.5 * min(budget, 2.0))
                    with contextlib.suppress(Exception):  # not there in time: read as it is
                        await page.wait_for_selector(wait_for, state="attached",
                                                     timeout=left * 1000)  # fmt: skip
                html = await page.content()
                url = page.url if page.url.startswith(("http://", "https://")) else resp.url
                js_cookies = await self._take_cookies(context, url)
        except TimeoutError:
            _discard(lent)
            await stack.aclose()  # closing the page ends a script that never stops
            raise RenderFailed(f"render took longer than render_timeout={budget:g}s") from None
        except asyncio.CancelledError:
            _discard(lent)
            await stack.aclose()
            raise
        except Exception as exc:  # the browser crashed or closed, the page failed to load
            _discard(lent)
            await stack.aclose()
            if isinstance(exc, RenderFailed | PermanentFetchError):
                raise
            raise RenderFailed(f"render failed: {_short(exc)}") from None
        self.rendered += 1
        headers = CIMultiDict(resp.headers)
        for name in _HOP:
            headers.popall(name, None)
        headers["Content-Type"] = "text/html; charset=utf-8"
        rendered = Response(
            url, resp.status, CIMultiDictProxy(headers), html.encode("utf-8"),
            (*resp.set_cookies, *state.set_cookies, *js_cookies),
        )  # fmt: skip
        return Rendered(rendered, page, stack.aclose, state.refused, state.blocked)

    async def _give_cookies(self, context: Any, url: str) -> None:
        """The crawl's cookies for ``url`` into the browser context (HTTP to browser)."""
        jar = self.session.cookie_jar
        morsels = jar.filter_cookies(URL(url))
        if morsels:
            await context.add_cookies(
                [{"name": name, "value": m.value, "url": url} for name, m in morsels.items()]
            )

    async def _take_cookies(self, context: Any, url: str) -> list[tuple[str, str]]:
        """Cookies the page set in the browser that the crawl's jar lacks (a script's
        ``document.cookie``), as ``(url, Set-Cookie value)``, put into the jar too."""
        jar = self.session.cookie_jar
        known = {name: m.value for name, m in jar.filter_cookies(URL(url)).items()}
        new: list[tuple[str, str]] = []
        for c in await context.cookies([url]):
            if known.get(c["name"]) == c["value"]:
                continue
            header = f"{c['name']}={c['value']}; Domain={c['domain']}; Path={c['path']}"
            if c.get("expires", -1) > 0:
                header += f"; Max-Age={max(0, int(c['expires'] - time.time()))}"
            if c.get("secure"):
                header += "; Secure"
            if c.get("httpOnly"):
                header += "; HttpOnly"
            cookie: SimpleCookie = SimpleCookie()
            with contextlib.suppress(Exception):
                cookie.load(header)
                jar.update_cookies(cookie, URL(url))
                new.append((url, header))
        return new

    async def _route_of(self, page: Any, route: Any) -> None:
        state = self._states.get(page)
        if state is None:  # between two pages (a late request of the last one): refused
            with contextlib.suppress(Exception):
                await route.abort("blockedbyclient")
            return
        await self._route(route, state)

    async def _route(self, route: Any, state: _PageState) -> None:
        """One request of the rendered page: the document from the response already
        fetched, anything else fetched by the crawl's session, or refused."""
        try:
            request = route.request
            url = request.url
            if (
                state.document is not None
                and request.is_navigation_request()
                and request.frame.parent_frame is None  # the page's own, not a frame's
            ):
                doc, state.document = state.document, None
                await route.fulfill(status=doc.status, headers=_browser_headers(doc.headers),
                                    body=doc.body)  # fmt: skip
                return
            if request.resource_type in self.blocked_types:
                state.blocked += 1
                await route.abort("blockedbyclient")
                return
            try:
                self._allowed(url)
            except (BadLink, ValueError) as exc:
                state.refused += 1
                logger.debug("rendered page's request refused: %s (%s)", url[:200], exc)
                await route.abort("blockedbyclient")
                return
            headers = {k: v for k, v in (await request.all_headers()).items()
                       if k.lower() not in _OWN and not k.startswith(":")}  # fmt: skip
            send = self.send_for(Request(url, method=request.method))
            send = Send(request.method, headers, request.post_data_buffer, None, send.proxy,
                        send.auth)  # fmt: skip
            try:
                resp = await fetch(self.session, url, self.settings, redirect_to=self._allowed,
                                   guard=self.guard, send=send)  # fmt: skip
            except AddressRefused as exc:
                state.refused += 1
                logger.debug("rendered page's request refused: %s (%s)", url[:200], exc)
                await route.abort("addressunreachable")
                return
            except (PermanentFetchError, TransientFetchError) as exc:
                logger.debug("rendered page's request failed: %s (%s)", url[:200], exc)
                await route.abort("failed")
                return
            state.set_cookies += resp.set_cookies
            await route.fulfill(status=resp.status, headers=_browser_headers(resp.headers),
                                body=resp.body)  # fmt: skip
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the page closed meanwhile, or a bug: never leave it hanging
            logger.debug("rendered page's request ended: %s", _short(exc))
            with contextlib.suppress(Exception):
                await route.abort("failed")

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()


@dataclass(slots=True)
class _PageState:
    document: Response | None  # the fetched document, until the browser asked for it
    set_cookies: tuple[tuple[str, str], ...] = ()
    refused: int = 0
    blocked: int = 0


def _browser_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """Response headers as the browser is given them: one value per name (Set-Cookie
    values joined by newlines, as Playwright takes them), no encoding or length."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        key = name.lower()
        if key in _HOP:
            continue
        out[key] = f"{out[key]}\n{value}" if key in out and key == "set-cookie" else value
    return out


def _discard(lent: Lent | None) -> None:
    if lent is not None:
        lent.keep = False  # a page that failed is closed, not reused


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"
