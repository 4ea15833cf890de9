"""``warc_dir``: each response the crawl receives (pages and downloads) into the worker's
WARC archive (``effects/warc.py``), with the request that asked for it.

The request record holds the headers crashsafe set (User-Agent, ``default_headers``, the
request's own), with the values of credentials (``Authorization``, ``Proxy-Authorization``,
``Cookie``) replaced by ``[redacted]``: an archive is shared more widely than a password.
Headers the HTTP client adds on the wire (Host, Accept-Encoding) are not in it. A redirect
is archived as its last response, under the final URL.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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


def archiver(settings: CrawlSettings) -> tuple[WarcArchive, Callable[[Response, Send], None]]:
    """The worker's archive in ``settings.warc_dir``, and what writes one exchange to it."""
    assert settings.warc_dir is not None
    archive = WarcArchive(Path(settings.warc_dir), f"pid{os.getpid()}")
    base = [("User-Agent", settings.user_agent), *settings.default_headers]

    def write(resp: Response, send: Send = GET) -> None:
        own = list((send.headers or {}).items())
        names = {k.lower() for k, _ in own}
        sent = [(k, v) for k, v in base if k.lower() not in names] + own
        archive.write_exchange(
            url=resp.url,
            method=send.method,
            request_headers=[(k, "[redacted]" if k.lower() in CREDENTIALS else v) for k, v in sent],
            request_body=send.body,
            status=resp.status,
            reason=_reason(resp.status),
            response_headers=list(resp.headers.items()),
            body=resp.body,
        )

    return archive, write
