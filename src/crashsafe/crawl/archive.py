"""``warc_dir``: each response the crawl receives (pages and downloads) into the worker's
WARC archive (``effects/warc.py``), with the request that asked for it.

The request record holds the headers crashsafe set (User-Agent, ``default_headers``, the
request's own), with the values of credentials (``Authorization``, ``Proxy-Authorization``,
``Cookie``) replaced by ``[redacted]``: an archive is shared more widely than a password.
Headers the HTTP client adds on the wire (Host, Accept-Encoding) are not in it. A redirect
is archived as its last response, under the final URL.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path

from crashsafe.crawl.fetch import GET, Response, Send
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.effects.warc import WarcArchive

CREDENTIALS = frozenset({"authorization", "proxy-authorization", "cookie"})


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class CrawlArchive:
    """The worker's archive in ``settings.warc_dir``: exchanges are compressed and written
    on a thread of their own, in the order they are handed over, so the event loop never
    waits for gzip (some milliseconds for a large body) or an fsync at rotation. Opening it
    repairs torn files of dead workers (``effects/warc.py``): open it off the loop too."""

    def __init__(self, settings: CrawlSettings) -> None:
        assert settings.warc_dir is not None
        self._archive = WarcArchive(Path(settings.warc_dir), f"pid{os.getpid()}")
        self._base = [("User-Agent", settings.user_agent), *settings.default_headers]
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="crashsafe-warc")

    async def write(self, resp: Response, send: Send = GET) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._write, resp, send)

    def _write(self, resp: Response, send: Send) -> None:
        own = list((send.headers or {}).items())
        names = {k.lower() for k, _ in own}
        sent = [(k, v) for k, v in self._base if k.lower() not in names] + own
        self._archive.write_exchange(
            url=resp.url,
            method=send.method,
            request_headers=[(k, "[redacted]" if k.lower() in CREDENTIALS else v) for k, v in sent],
            request_body=send.body,
            status=resp.status,
            reason=_reason(resp.status),
            response_headers=list(resp.headers.items()),
            body=resp.body,
        )

    def close(self) -> None:
        """Wait for the writes handed over, then close (fsync) the file."""
        self._pool.shutdown(wait=True)
        self._archive.close()
