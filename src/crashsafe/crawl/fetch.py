"""HTTP fetching: one aiohttp session, redirects followed by hand, size cap, timeouts.

Errors are sorted into two kinds the engine acts on: :class:`TransientFetchError`
(timeouts, connection errors; retried with backoff; a failed TLS handshake is one too,
:class:`TLSFetchError`, which robots.txt never waits out) and :class:`PermanentFetchError`
(redirect loop, response too large; the URL fails at once).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from urllib.parse import urljoin

import aiohttp
import aiohttp.abc
from multidict import CIMultiDictProxy
from yarl import URL

from crashsafe.crawl.addresses import AddressGuard, AddressRefused
from crashsafe.crawl.allow import BadLink, client_url
from crashsafe.crawl.fetch_errors import (
    FetchError,
    PermanentFetchError,
    TLSFetchError,
    TransientFetchError,
)
from crashsafe.crawl.robots import ROBOTS_MAX_BYTES, ROBOTS_MAX_REDIRECTS
from crashsafe.crawl.settings import CrawlSettings

__all__ = [
    "GET",
    "REDIRECTS",
    "FetchError",
    "PermanentFetchError",
    "Response",
    "Send",
    "TLSFetchError",
    "TransientFetchError",
    "fetch",
    "new_session",
]

REDIRECTS = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True)
class Response:
    url: str  # after redirects
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes
    #: (URL, Set-Cookie value) of every response on the way, redirects included.
    set_cookies: tuple[tuple[str, str], ...] = ()


#: What a request's own headers may hold that is for its origin only: dropped when a
#: redirect leads to another origin (as browsers, curl and requests do).
CREDENTIALS = frozenset({"authorization", "cookie"})
#: A recrawl's conditional request headers (crawl/revisits.py): dropped at a redirect.
CONDITIONAL = frozenset({"if-none-match", "if-modified-since"})


@dataclass(frozen=True, slots=True)
class Send:
    """What a request sends beyond its URL. A redirect 301/302/303 turns it into a GET
    without a body (as browsers and Scrapy do), 307/308 keep it; a redirect to another
    origin drops the request's own credentials (``Authorization`` and ``Cookie`` headers,
    ``cookies``; the jar's cookies follow their own domains)."""

    method: str = "GET"
    headers: Mapping[str, str] | None = None
    body: bytes | None = None
    cookies: Mapping[str, str] | None = None
    proxy: str | None = None
    #: the Authorization header for an origin (host, port), or None; asked at every hop.
    auth: Callable[[str, int | None], str | None] | None = None

    def headers_for(self, host: str, port: int | None) -> Mapping[str, str] | None:
        """The request's headers, with basic auth for this origin unless the request
        carries an Authorization header of its own (its own headers win)."""
        authorization = self.auth(host, port) if self.auth is not None else None
        if authorization is None:
            return self.headers
        if self.headers and any(k.lower() == "authorization" for k in self.headers):
            return self.headers
        return {**(self.headers or {}), "Authorization": authorization}

    def after_redirect(self, status: int, *, same_origin: bool) -> Send:
        sent = self
        if self.headers and any(k.lower() in CONDITIONAL for k in self.headers):
            # Validators are for the URL they were kept for, not where it now leads.
            kept = {k: v for k, v in self.headers.items() if k.lower() not in CONDITIONAL}
            sent = replace(sent, headers=kept)
        if not same_origin and (sent.cookies or sent.headers):
            headers = sent.headers
            if headers:
                headers = {k: v for k, v in headers.items() if k.lower() not in CREDENTIALS}
            sent = replace(sent, headers=headers, cookies=None)
        if status in (301, 302, 303) and self.method != "HEAD":
            headers = sent.headers
            if headers:
                headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
            sent = replace(sent, method="GET", body=None, headers=headers)
        return sent


GET = Send()


def new_session(
    settings: CrawlSettings, *, resolver: aiohttp.abc.AbstractResolver | None = None
) -> aiohttp.ClientSession:
    """The crawl's HTTP session; ``resolver`` (an address guard) decides which addresses
    a name may connect to."""
    connector = aiohttp.TCPConnector(
        limit=settings.concurrency + 4,  # + robots.txt fetches
        limit_per_host=0,  # the engine enforces per-host limits itself
        ttl_dns_cache=300,
        resolver=resolver,
    )
    jar: aiohttp.abc.AbstractCookieJar = aiohttp.DummyCookieJar()
    if settings.cookies_enabled:
        from crashsafe.crawl.sessions import CookieJar  # (no public-suffix cookies)

        jar = CookieJar()
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=settings.timeout),
        headers={**dict(settings.default_headers), "User-Agent": settings.user_agent},
        cookie_jar=jar,
        auto_decompress=True,
        # Proxies from the environment are looked up once per crawl (crawl/sessions.py),
        # not for every request as trust_env would.
    )


async def _read_capped(resp: aiohttp.ClientResponse, cap: int, *, truncate: bool) -> bytes:
    """The body, at most ``cap`` bytes: a larger one fails, or with ``truncate`` is cut."""
    if resp.content_length is not None and resp.content_length > cap and not truncate:
        raise PermanentFetchError(
            f"response too large: {resp.content_length} bytes > max_response_bytes={cap}"
        )
    if (
        resp.content_length is not None
        and resp.content_length <= cap
        and "Content-Encoding" not in resp.headers
    ):
        return await resp.read()  # known, allowed, and not inflated by decompression
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > cap:
            if truncate:
                chunks.append(chunk[: len(chunk) - (size - cap)])
                break
            raise PermanentFetchError(f"response too large: over max_response_bytes={cap}")
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    settings: CrawlSettings,
    *,
    redirect_to: Callable[[str], str | None] = lambda url: url,
    guard: AddressGuard | None = None,
    max_redirects: int | None = None,
    max_bytes: int | None = None,
    truncate: bool = False,
    send: Send = GET,
) -> Response:
    """Request ``url`` as ``send`` says (a GET by default), following up to
    ``max_redirects`` redirects.

    ``redirect_to`` turns a redirect's target into the URL to request next (canonical,
    allowed), or None to stop there: the redirect is then returned as the response
    itself; BadLink from it fails the fetch. ``guard`` checks IP literals (the session's
    resolver checks names). Limits
    default to the settings'; with ``truncate`` a body over ``max_bytes`` is cut there
    instead of failing.
    """
    redirects = settings.max_redirects if max_redirects is None else max_redirects
    cap = settings.max_response_bytes if max_bytes is None else max_bytes
    current = url
    cookies: list[tuple[str, str]] = []
    for hop in range(redirects + 1):
        request_url = client_url(current)  # what the allow decision was made on
        if guard is not None:
            try:
                await _check_hop(guard, request_url, send)
            except AddressRefused as exc:
                exc.unsent = hop == 0
                raise
        try:
            async with session.request(
                send.method,
                request_url,
                allow_redirects=False,
                headers=send.headers_for(request_url.raw_host or "", request_url.port),
                data=send.body,
                cookies=send.cookies,
                proxy=send.proxy,
            ) as resp:
                cookies += [(current, v) for v in resp.headers.getall("Set-Cookie", ())]
                location = resp.headers.get("Location")
                if resp.status in REDIRECTS and location:
                    try:
                        target = urljoin(current, location)
                    except ValueError as exc:  # e.g. "http://[::1": Invalid IPv6 URL
                        raise PermanentFetchError(
                            f"redirect to a URL that cannot be parsed: {location[:200]!r} ({exc})"
                        ) from exc
                    try:
                        follow = redirect_to(target)
                    except BadLink as exc:
                        raise PermanentFetchError(
                            f"redirect to a URL that cannot be crawled: {location[:200]!r} ({exc})"
                        ) from exc
                    if follow is not None:
                        same = client_url(follow).origin() == request_url.origin()
                        current = follow
                        send = send.after_redirect(resp.status, same_origin=same)
                        continue
                body = await _read_capped(resp, cap, truncate=truncate)
                return Response(current, resp.status, resp.headers, body, tuple(cookies))
        except AddressRefused as exc:  # (the resolver's: no address the crawl may reach)
            exc.unsent = hop == 0
            raise
        except TimeoutError as exc:
            raise TransientFetchError(f"timeout after {settings.timeout:g}s") from exc
        except asyncio.CancelledError:
            raise
        except aiohttp.ClientSSLError as exc:
            raise TLSFetchError(f"TLS handshake failed: {_tls_reason(exc)}") from exc
        except aiohttp.ClientConnectorDNSError as exc:
            raise TransientFetchError(f"name does not resolve: {exc.host}") from exc
        except aiohttp.ClientConnectorError as exc:
            raise TransientFetchError(
                f"{_connect_reason(exc.os_error)} ({exc.host}:{exc.port})"
            ) from exc
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise TransientFetchError(f"{type(exc).__name__}: {exc}") from exc
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a URL yarl refuses
            raise PermanentFetchError(f"{type(exc).__name__}: {exc}") from exc
    raise PermanentFetchError(f"more than {redirects} redirects (last: {current[:200]})")


async def _check_hop(guard: AddressGuard, request_url: URL, send: Send) -> None:
    """Refuse a hop to an address the crawl may not connect to, as far as it can be told
    before the request (the session's resolver checks the names it resolves)."""
    target = request_url.raw_host or ""
    guard.check_host(target, request_url.port)
    if send.proxy:
        # The connection ends at the proxy, which may be special only if it is the
        # crawl's own; and the proxy resolves the target's name unseen by the resolver's
        # check: the target is resolved and checked here first.
        proxy = URL(send.proxy)
        guard.check_proxy(proxy.raw_host or "", proxy.port)
        await guard.check_proxied(target, request_url.port)
    elif guard.is_proxy(target, request_url.port or 0):
        # The proxy's own endpoint asked for as a server (NO_PROXY, a link): the resolver
        # lets the proxy's name through as the proxy; checked here.
        await guard.check_proxied(target, request_url.port)


def _connect_reason(error: OSError) -> str:
    """``connection refused``: what an OSError of a connect means, in a few words."""
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, TimeoutError):
        return "connect timed out"
    if error.errno:
        return os.strerror(error.errno).lower()
    return str(error) or type(error).__name__


def _tls_reason(exc: aiohttp.ClientSSLError) -> str:
    """``certificate verify failed: self-signed certificate (is https:// right for
    host:port?)``: OpenSSL's reason, without aiohttp's wrapping."""
    cause = getattr(exc, "os_error", None) or exc.__cause__ or exc
    reason = getattr(cause, "verify_message", None) or getattr(cause, "reason", None)
    text = str(reason or cause).replace("_", " ").lower() if reason else str(cause)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        text = f"certificate verify failed: {text}"
    hint = " (does that port speak plain HTTP? try http://)" if "wrong version" in text else ""
    return f"{text}{hint}"


def robots_download(
    session: aiohttp.ClientSession,
    settings: CrawlSettings,
    *,
    redirect_to: Callable[[str], str | None],
    guard: AddressGuard | None,
    send_for: Callable[[str], Send] = lambda url: GET,
) -> Callable[[str], Awaitable[tuple[int, bytes]]]:
    """How robots.txt is downloaded (RFC 9309): at most 5 redirects, each through the
    crawl's allow decision, and the body cut at 500 KiB instead of failing; sent as
    ``send_for(url)`` says (through the crawl's proxy, as its pages are)."""

    async def download(url: str) -> tuple[int, bytes]:
        resp = await fetch(
            session,
            url,
            settings,
            redirect_to=redirect_to,
            guard=guard,
            max_redirects=ROBOTS_MAX_REDIRECTS,
            max_bytes=ROBOTS_MAX_BYTES,
            truncate=True,
            send=send_for(url),
        )
        return resp.status, resp.body

    return download
