"""``warc_dir``: each response the crawl receives (pages and downloads) into the worker's
WARC archive (``effects/warc.py``), with the request that asked for it.

The request record holds the headers crashsafe set (User-Agent, ``default_headers``, the
request's own), with the values of credentials (``Authorization``, ``Proxy-Authorization``,
``Cookie``, ``X-Api-Key``, ``*-Token`` and the other names of crashsafe/sealed.py, and the
``secret_headers`` setting's) replaced by ``[redacted]``, and so is a body holding a
credential field (a login form's ``password=``): an archive is shared more widely than a
password.
Headers the HTTP client adds on the wire (Host, Accept-Encoding) are not in it. A redirect
is archived as its last response, under the final URL.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from pathlib import Path

from crashsafe.crawl.fetch import GET, Response, Send
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.effects.warc import WarcArchive
from crashsafe.sealed import is_secret_header, secret_body


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


INLINE_MAX = 64 * 1024  # bodies up to this are archived on the event loop (about 2 ms)


class CrawlArchive:
    """The worker's archive in ``settings.warc_dir``. A page's exchange is built and
    written on the event loop (160 us for a 9 KB page); a large body's, and one that
    rotates the file (an fsync), on a thread, so the loop never waits for them. (Every
    write on a thread cost 650 us of CPU a page, the hand-offs more than the work: 5 100
    pages took 6.1 s instead of 3.7 s.) A lock keeps their writes apart. Opening it
    repairs torn files of dead workers (``effects/warc.py``): open it off the loop too."""

    def __init__(self, settings: CrawlSettings) -> None:
        assert settings.warc_dir is not None
        self._archive = WarcArchive(Path(settings.warc_dir), f"pid{os.getpid()}")
        self._base = [("User-Agent", settings.user_agent), *settings.default_headers]
        self._secret = settings.secret_headers
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="crashsafe-warc")
        self._lock = threading.Lock()

    async def write(self, resp: Response, send: Send = GET) -> None:
        # On the loop only if it is quick: a small body, no rotation (an fsync) due, and
        # the thread not writing (waiting for it would block the loop).
        size = len(resp.body)
        if size <= INLINE_MAX and self._lock.acquire(blocking=False):
            try:
                if self._archive.fits(size + 4096):
                    self._write_locked(resp, send)
                    return
            finally:
                self._lock.release()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._pool, self._write, resp, send)

    def _write(self, resp: Response, send: Send) -> None:
        with self._lock:
            self._write_locked(resp, send)

    def _write_locked(self, resp: Response, send: Send) -> None:
        own = list((send.headers or {}).items())
        names = {k.lower() for k, _ in own}
        sent = [(k, v) for k, v in self._base if k.lower() not in names] + own
        self._archive.write_exchange(
            url=resp.url,
            method=send.method,
            request_headers=[
                (k, "[redacted]" if is_secret_header(k, self._secret) else v) for k, v in sent
            ],
            request_body=b"[redacted]" if send.body and secret_body(send.body) else send.body,
            status=resp.status,
            reason=_reason(resp.status),
            response_headers=list(resp.headers.items()),
            body=resp.body,
        )

    def close(self) -> None:
        """Wait for the writes handed over, then close (fsync) the file."""
        self._pool.shutdown(wait=True)
        self._archive.close()
