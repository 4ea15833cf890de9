"""Rendering a fetched page in Chromium, and deciding which pages need it.

A page is fetched as every page is (robots.txt, host slots, the allow-list, the address
guard, cookies, proxy), then, when it needs rendering, that very response is handed to
the browser as the page's document: the page is downloaded once. Every further request
of the page's context (scripts, data, frames, popups) is intercepted and sent by the
crawl's own HTTP session, through the same allow decision (``browser_allowed_domains``,
else the crawl's allow-list) and address guard a fetched page passes, six at a time per
page, robots.txt asked for the page's own navigations; or it is refused. WebSockets are
refused, popups closed, and Chromium is started with a proxy that does not exist, so
whatever would still try the network itself (a preconnect, a beacon) reaches nothing.
Cookies go both ways: the context holds exactly the crawl's jar when a page starts, and
what the page set (responses' ``Set-Cookie``, ``document.cookie``) comes back to the jar
and is stored with the page's done mark.

``"auto"`` mode: a page is fetched and checked for ``render_when_missing``; only when the
selector matches nothing is it rendered. What each URL pattern (:func:`pattern_of`) showed
is counted in the store with the page's commit (pages that were whole as fetched, or
that the browser did not help; pages the browser made whole), and a pattern whose pages
only ever needed the browser is rendered straight away (its HTML is not checked first;
one page in :data:`RECHECK_EVERY` still is), also after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from crashsafe.crawl.addresses import AddressGuard, AddressRefused
from crashsafe.crawl.allow import AllowList, BadLink, check_allowed
from crashsafe.crawl.browser import BrowserPool, Lent, find_chromium, playwright_api
from crashsafe.crawl.fetch import (
    PermanentFetchError,
    Response,
    Send,
    TransientFetchError,
    fetch,
)
from crashsafe.crawl.requests import Request
from crashsafe.crawl.robots import Robots, RobotsUnavailable
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError

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


RECHECK_EVERY = 16  # of a pattern's pages sent straight to the browser, one is checked


class RenderModes:
    """Auto mode's memory: per URL pattern, pages that were whole as fetched (or that
    the browser did not help) and pages the browser made whole, as committed (loaded from
    the store at start)."""

    def __init__(self, counts: Mapping[str, tuple[int, int]] | None = None) -> None:
        self.counts: dict[str, list[int]] = {p: [h, b] for p, (h, b) in (counts or {}).items()}
        self._straight = 0

    def straight_to_browser(self, pattern: str) -> bool:
        """Whether a page of ``pattern`` goes to the browser without a look at its HTML:
        once some of its pages needed the browser and none was whole without it. (A
        pattern with both kinds has each page checked: a check costs a parse, a rendering
        far more.) One such page in :data:`RECHECK_EVERY` is checked all the same, so a
        site that stopped needing the browser is noticed."""
        http, browser = self.counts.get(pattern, (0, 0))
        if not (browser > 0 and http == 0):
            return False
        self._straight += 1
        return self._straight % RECHECK_EVERY != 0

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
    #: the cookies the page set since the DOM was first read (the callback drove it)
    later_cookies: Callable[[], Awaitable[list[tuple[str, str]]]] | None = None


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
        robots: Callable[[], Robots | None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.session = session
        self.guard = guard
        self.allowed = allowed
        self.send_for = send_for
        self.robots = robots
        self._pool = pool
        self.blocked_types = frozenset(settings.browser_block)
        self._states: dict[Any, _PageState] = {}  # page -> what it is rendering now

    def check(self) -> None:
        """ConfigError, in one line, if pages cannot be rendered here (no Chromium, no
        Playwright)."""
        find_chromium(self.settings.browser_executable)
        playwright_api()

    @property
    def pool(self) -> BrowserPool:
        if self._pool is None:  # (the first page that needs the browser starts it)
            self._pool = BrowserPool(
                self.settings, user_agent=self.settings.user_agent, on_context=self._guard_context
            )
        return self._pool

    def _allowed(self, url: str) -> str:
        """``url`` if a rendered page may request it, else BadLink."""
        return check_allowed(url, self.allowed, "browser_allowed_domains")

    async def render(self, resp: Response, request: Request) -> Rendered:
        """``resp`` rendered in the browser. Raises RenderFailed when the page does not
        load, settle and give its DOM within ``render_timeout`` (counted from when a
        browser page is free for it), or the browser fails; ConfigError when there is no
        browser to run; PermanentFetchError for a DOM over ``max_response_bytes``."""
        budget = self.settings.render_timeout
        stack = contextlib.AsyncExitStack()
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(resp.url))
        state = _PageState(resp)
        lent: Lent | None = None
        try:
            lent = await stack.enter_async_context(self.pool.page(origin))
            deadline = time.monotonic() + budget
            page, context = lent.page, lent.context
            self._states[page] = state
            stack.callback(self._states.pop, page, None)
            async with asyncio.timeout(budget):
                await self._give_cookies(context, resp.url, state, reset=lent.alone)
                await page.goto(resp.url, wait_until="load")
                wait_for = self.settings.render_wait_for or self.settings.render_when_missing
                left = deadline - time.monotonic() - min(budget / 4, 2.0)
                if wait_for and left > 0:
                    with contextlib.suppress(Exception):  # not there in time: read as it is
                        await page.wait_for_selector(wait_for, state="attached",
                                                     timeout=left * 1000)  # fmt: skip
                html = await _content(page)
                url = page.url if page.url.startswith(("http://", "https://")) else resp.url
                js_cookies = await self._take_cookies(context, url, state)
        except TimeoutError:
            _discard(lent)
            await stack.aclose()  # closing the page ends a script that never stops
            raise RenderFailed(f"render took longer than render_timeout={budget:g}s") from None
        except asyncio.CancelledError:
            _discard(lent)
            await stack.aclose()
            raise
        except ConfigError:  # no Chromium, no Playwright: the crawl stops (pages.py)
            await stack.aclose()
            raise
        except Exception as exc:  # the browser crashed or closed, the page failed to load
            _discard(lent)
            await stack.aclose()
            if isinstance(exc, RenderFailed):
                raise
            await self.pool.check_alive(exc, None if lent is None else lent.launched)
            raise RenderFailed(f"render failed: {_short(exc)}") from None
        body = html.encode("utf-8")
        if len(body) > self.settings.max_response_bytes:
            _discard(lent)
            await stack.aclose()
            raise PermanentFetchError(
                f"rendered page too large: {len(body)} bytes > max_response_bytes="
                f"{self.settings.max_response_bytes}"
            )
        headers = CIMultiDict(resp.headers)
        for name in _HOP:
            headers.popall(name, None)
        headers["Content-Type"] = "text/html; charset=utf-8"
        rendered = Response(
            url, resp.status, CIMultiDictProxy(headers), body,
            (*resp.set_cookies, *state.set_cookies, *js_cookies),
        )  # fmt: skip
        served = len(state.set_cookies)

        async def later_cookies() -> list[tuple[str, str]]:
            """Cookies the page set while the callback drove it: its responses' since
            the DOM was read, and its scripts' (put into the jar too)."""
            responses = list(state.set_cookies[served:])
            try:
                return responses + await self._take_cookies(context, url, state)
            except Exception:  # the page or its browser is gone: what its responses set
                return responses

        return Rendered(rendered, page, stack.aclose, later_cookies)

    async def _guard_context(self, context: Any) -> None:
        """A new context's requests go through :meth:`_route`; its WebSockets are refused
        and its popups closed."""
        await context.route("**/*", self._route_of)
        with contextlib.suppress(AttributeError):  # Playwright >= 1.48
            await context.route_web_socket("**/*", _refuse_web_socket)
        context.on("page", _close_popup)

    async def _give_cookies(
        self, context: Any, url: str, state: _PageState, *, reset: bool
    ) -> None:
        """The crawl's cookies for ``url``'s host into the browser context (HTTP to
        browser). ``reset`` (no other page of the context is open): the context holds
        those and nothing else, so a cookie the crawl deleted is not brought back; else
        they are added over what the context holds (another page's script may have set
        one that is not in the jar yet). What the page starts with is noted in
        ``state``: only a value the page changed counts as the page's own."""
        if reset:
            await context.clear_cookies()
        host = (urlsplit(url).hostname or "").lower()
        cookies = []
        for m in self.session.cookie_jar:
            domain = (m["domain"] or host).lstrip(".").lower()
            if not (host == domain or host.endswith("." + domain)):
                continue
            cookies.append({
                # (without the dot a domain is host-only to Playwright)
                "name": m.key, "value": m.value,
                "domain": domain if domain == host else "." + domain,
                "path": m["path"] or "/", "secure": bool(m["secure"]),
                "httpOnly": bool(m["httponly"]),
            })  # fmt: skip
        if cookies:
            try:
                await context.add_cookies(cookies)
            except Exception:  # one Chromium refuses: the others all the same
                for cookie in cookies:
                    try:
                        await context.add_cookies([cookie])
                    except Exception as exc:
                        logger.debug("cookie %s not given to the browser: %s",
                                     cookie["name"], _short(exc))  # fmt: skip
        # What the page starts with (a cookie another page of the context holds too):
        # only what differs from it is the page's own doing.
        state.given = {c["name"]: c["value"] for c in await context.cookies([url])}

    async def _take_cookies(
        self, context: Any, url: str, state: _PageState
    ) -> list[tuple[str, str]]:
        """Cookies the page itself set in the browser (a script's ``document.cookie``):
        those whose value is neither what the context was given nor what the crawl's jar
        holds (a response the crawl fetched for the page set those), as ``(url,
        Set-Cookie value)``, put into the jar too. A cookie the jar got newer meanwhile
        (another page) is not taken back to its older value."""
        jar = self.session.cookie_jar
        known = {(m["domain"], m["path"], m.key): m.value for m in jar}
        new: list[tuple[str, str]] = []
        for c in await context.cookies([url]):
            domain = c["domain"]
            if state.given.get(c["name"]) == c["value"]:
                continue
            if known.get((domain.lstrip("."), c["path"], c["name"])) == c["value"]:
                continue
            header = f"{c['name']}={c['value']}; Path={c['path']}"
            if domain.startswith("."):  # a domain cookie; without the dot: host-only
                header += f"; Domain={domain.lstrip('.')}"
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

    async def _route_of(self, route: Any) -> None:
        """A request of any page of a context: refused unless its page is rendering."""
        try:
            state = self._states.get(route.request.frame.page)
        except Exception:  # a worker's request has no frame: refused
            state = None
        if state is None:  # a popup, or between two pages (a late request): refused
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
                and url == state.document.url
            ):
                doc, state.document = state.document, None
                await route.fulfill(status=doc.status, headers=_browser_headers(doc.headers),
                                    body=doc.body)  # fmt: skip
                return
            if request.resource_type in self.blocked_types:
                await route.abort("blockedbyclient")
                return
            try:
                self._allowed(url)
                if request.is_navigation_request():
                    await self._robots_allow(url)
            except (BadLink, ValueError, RobotsUnavailable) as exc:
                logger.debug("rendered page's request refused: %s (%s)", url[:200], exc)
                await route.abort("blockedbyclient")
                return
            headers = {k: v for k, v in (await request.all_headers()).items()
                       if k.lower() not in _OWN and not k.startswith(":")}  # fmt: skip
            # A cookie the page itself changed (a script) wins over the jar's; the others
            # are the jar's, which may be newer than what the page was given.
            cookies = {name: value for name, value in _cookie_header(headers.pop("cookie", ""))
                       if state.given.get(name) != value}  # fmt: skip
            send = self.send_for(Request(url, method=request.method))
            send = Send(request.method, headers, request.post_data_buffer, cookies or None,
                        send.proxy, send.auth)  # fmt: skip
            try:
                async with state.requests:
                    resp = await fetch(
                        self.session, url, self.settings, redirect_to=self._allowed,
                        guard=self.guard, send=send,
                    )  # fmt: skip
            except AddressRefused as exc:
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

    async def _robots_allow(self, url: str) -> None:
        """BadLink if robots.txt disallows ``url`` (a page's navigation: a script sending
        the page elsewhere, a frame)."""
        robots = self.robots()
        if robots is None:
            return
        verdict = robots.check_loaded(url) or await robots.check(url)
        if not verdict[0]:
            raise BadLink("disallowed by robots.txt")

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()


PAGE_REQUESTS = 6  # requests of one rendered page in flight at once (as a browser's per host)


@dataclass(slots=True)
class _PageState:
    document: Response | None  # the fetched document, until the browser asked for it
    set_cookies: tuple[tuple[str, str], ...] = ()
    given: dict[str, str] = field(default_factory=dict)  # cookies the context was given
    requests: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(PAGE_REQUESTS))


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


async def _content(page: Any) -> str:
    """The page's DOM as HTML; a script navigating just then is waited out once."""
    try:
        return str(await page.content())
    except Exception as exc:
        if "navigating" not in str(exc):
            raise
        await page.wait_for_load_state("load")
        return str(await page.content())


def _cookie_header(value: str) -> list[tuple[str, str]]:
    """The (name, value) pairs of a ``Cookie`` request header, as sent (RFC 6265 4.2:
    ``name=value`` pairs separated by ``;``, values not parsed any further)."""
    pairs = []
    for part in value.split(";"):
        name, sep, text = part.strip().partition("=")
        if sep and name:
            pairs.append((name, text))
    return pairs


async def _refuse_web_socket(ws: Any) -> None:
    """A rendered page's WebSocket: closed, never connected to its server."""
    with contextlib.suppress(Exception):
        await ws.close(code=1008, reason="crashsafe: WebSockets are not crawled")


def _close_popup(page: Any) -> None:
    """A page the rendered page opened (``window.open``, ``target=_blank``): closed (its
    requests are refused meanwhile: it is no page of ours)."""
    task = asyncio.ensure_future(_close_if_popup(page))
    _POPUP_TASKS.add(task)
    task.add_done_callback(_POPUP_TASKS.discard)


_POPUP_TASKS: set[asyncio.Future[None]] = set()


async def _close_if_popup(page: Any) -> None:
    with contextlib.suppress(Exception):
        if await page.opener() is not None or page.url not in ("", "about:blank"):
            await page.close()


def _discard(lent: Lent | None) -> None:
    if lent is not None:
        lent.keep = False  # a page that failed is closed, not reused


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"
