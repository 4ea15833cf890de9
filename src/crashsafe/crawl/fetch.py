"""HTTP fetching: one aiohttp session, redirects followed by hand, size cap, timeouts.

Errors are sorted into two kinds the engine acts on: :class:`TransientFetchError`
(timeouts, connection errors; retried with backoff) and :class:`PermanentFetchError`
(redirect loop, response too large; the URL fails at once).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from crashsafe.crawl.fetch_errors import FetchError, PermanentFetchError, TransientFetchError
from crashsafe.crawl.settings import CrawlSettings

__all__ = [
    "REDIRECTS",
    "FetchError",
    "PermanentFetchError",
    "Response",
    "TransientFetchError",
    "fetch",
    "new_session",
]

REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Only characters that may stand in an already percent-encoded URL (RFC 3986).
_ENCODED = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")


@dataclass(frozen=True, slots=True)
class Response:
    url: str  # after redirects
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes


def new_session(settings: CrawlSettings) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(
        limit=settings.concurrency + 4,  # + robots.txt fetches
        limit_per_host=0,  # the engine enforces per-host limits itself
        ttl_dns_cache=300,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=settings.timeout),
        headers={"User-Agent": settings.user_agent},
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=True,
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
    may_follow: Callable[[str], bool] = lambda _url: True,
    max_redirects: int | None = None,
    max_bytes: int | None = None,
    truncate: bool = False,
) -> Response:
    """GET ``url``, following up to ``max_redirects`` redirects that ``may_follow`` allows.

    A redirect that ``may_follow`` refuses is returned as the response itself. Limits
    default to the settings'; with ``truncate`` a body over ``max_bytes`` is cut there
    instead of failing.
    """
    redirects = settings.max_redirects if max_redirects is None else max_redirects
    cap = settings.max_response_bytes if max_bytes is None else max_bytes
    current = url
    for _ in range(redirects + 1):
        # Frontier URLs are canonical, hence percent-encoded already: tell yarl so, which
        # spares it re-quoting every request.
        request_url = URL(current, encoded=True) if _ENCODED.fullmatch(current) else current
        try:
            async with session.get(request_url, allow_redirects=False) as resp:
                location = resp.headers.get("Location")
                if resp.status in REDIRECTS and location:
                    try:
                        target = urljoin(current, location)
                    except ValueError as exc:  # e.g. "http://[::1": Invalid IPv6 URL
                        raise PermanentFetchError(
                            f"redirect to a URL that cannot be parsed: {location[:200]!r} ({exc})"
                        ) from exc
                    if may_follow(target):
                        current = target
                        continue
                body = await _read_capped(resp, cap, truncate=truncate)
                return Response(current, resp.status, resp.headers, body)
        except TimeoutError as exc:
            raise TransientFetchError(f"timeout after {settings.timeout:g}s") from exc
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise TransientFetchError(f"{type(exc).__name__}: {exc}") from exc
        except (aiohttp.ClientError, ValueError) as exc:  # ValueError: a URL yarl refuses
            raise PermanentFetchError(f"{type(exc).__name__}: {exc}") from exc
    raise PermanentFetchError(f"more than {redirects} redirects (last: {current[:200]})")
