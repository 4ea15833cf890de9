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


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    if resp.content_length is not None and resp.content_length > cap:
        raise PermanentFetchError(
            f"response too large: {resp.content_length} bytes > max_response_bytes={cap}"
        )
    if resp.content_length is not None and "Content-Encoding" not in resp.headers:
        return await resp.read()  # known, allowed, and not inflated by decompression
    chunks: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_any():
        size += len(chunk)
        if size > cap:
            raise PermanentFetchError(f"response too large: over max_response_bytes={cap}")
        chunks.append(chunk)
    return b"".join(chunks)


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    settings: CrawlSettings,
    *,
    may_follow: Callable[[str], bool] = lambda _url: True,
) -> Response:
    """GET ``url``, following up to ``max_redirects`` redirects that ``may_follow`` allows.

    A redirect that ``may_follow`` refuses is returned as the response itself.
    """
    current = url
    for _ in range(settings.max_redirects + 1):
        # Frontier URLs are canonical, hence percent-encoded already: tell yarl so, which
        # spares it re-quoting every request.
        request_url = URL(current, encoded=True) if _ENCODED.fullmatch(current) else current
        try:
            async with session.get(request_url, allow_redirects=False) as resp:
                location = resp.headers.get("Location")
                if resp.status in REDIRECTS and location:
                    target = urljoin(current, location)
                    if may_follow(target):
                        current = target
                        continue
                body = await _read_capped(resp, settings.max_response_bytes)
                return Response(current, resp.status, resp.headers, body)
        except TimeoutError as exc:
            raise TransientFetchError(f"timeout after {settings.timeout:g}s") from exc
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise TransientFetchError(f"{type(exc).__name__}: {exc}") from exc
        except aiohttp.ClientError as exc:
            raise PermanentFetchError(f"{type(exc).__name__}: {exc}") from exc
    raise PermanentFetchError(f"more than {settings.max_redirects} redirects (last: {current})")
