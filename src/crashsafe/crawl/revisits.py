"""Recrawls that cost only what changed (issue #29): what a page's fetch showed is kept
with its done mark, and the next pass asks for changes only.

- Every page fetched and parsed keeps its validators (``ETag``, ``Last-Modified``), the
  SHA-256 of its body, and a fingerprint of the spider that parsed it (its source file).
- In a recrawl (the crawl has had ``crashsafe recrawl``), a plain GET of a page that has
  them is sent with ``If-None-Match`` / ``If-Modified-Since``. A ``304 Not Modified`` is
  the page fetched and unchanged: no body, no parse, its records kept (not gone, no new
  version). A server that ignores validators sends the body again: when its digest is
  the one kept, the page is unchanged all the same and is not parsed.
- Only while the spider is the same: a changed spider file parses every page again (its
  records may come out otherwise). Rendered pages are always fetched and parsed whole
  (their data may come from scripts whose answers changed under the same HTML).
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Seen", "body_digest", "spider_fingerprint", "validators_of"]


@dataclass(frozen=True, slots=True)
class Seen:
    """What a page's last fetch showed."""

    etag: str | None
    last_modified: str | None
    sha256: str
    spider: str

    def conditional(self) -> dict[str, str]:
        """The headers that ask the server for the page only if it changed."""
        headers = {}
        if self.etag:
            headers["If-None-Match"] = self.etag
        if self.last_modified:
            headers["If-Modified-Since"] = self.last_modified
        return headers

    @classmethod
    def parse(cls, text: str | None) -> Seen | None:
        if not text:
            return None
        try:
            data = json.loads(text)
            return cls(data.get("etag"), data.get("last_modified"), data["sha256"],
                       data["spider"])  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:32]


def validators_of(headers: Mapping[str, str], digest: str, spider: str) -> str:
    """The JSON kept with a done page (``frontier.validators``)."""
    out: dict[str, Any] = {"sha256": digest, "spider": spider}
    etag, modified = headers.get("ETag"), headers.get("Last-Modified")
    if etag and len(etag) <= 200:
        out["etag"] = etag
    if modified and len(modified) <= 100:
        out["last_modified"] = modified
    return json.dumps(out, separators=(",", ":"))


def spider_fingerprint(cls: type) -> str:
    """A digest of the file that defines spider class ``cls`` (its name alone when there
    is no file): a changed spider parses every page again. (Computed once per crawl.)"""
    try:
        source = inspect.getsource(inspect.getmodule(cls) or cls)
    except (OSError, TypeError):
        source = ""
    seed = f"{cls.__module__}.{cls.__qualname__}\n{source}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]
