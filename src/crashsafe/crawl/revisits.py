"""Recrawls that cost only what changed (issue #29): what a page's fetch showed is kept
with its done mark, and the next pass asks for changes only.

- Every page fetched and parsed keeps its validators (``ETag``, ``Last-Modified``), the
  SHA-256 of its body, and a fingerprint of the spider that parsed it (its source file).
- In a recrawl (the crawl has had ``crashsafe recrawl``), a plain GET of a page that has
  them is sent with ``If-None-Match`` / ``If-Modified-Since``. A ``304 Not Modified`` is
  the page fetched and unchanged: no body, no parse, its records kept (not gone, no new
  version). A server that ignores validators sends the body again: when its digest is
  the one kept, the page is unchanged all the same and is not parsed.
- Only while the spider is the same (its file, its arguments, the crawl's settings) and
  the page is where it was (no redirect): else it is parsed whole. A page found unchanged
  yields again the records its last parse yielded (their ids are kept with it): they are
  not gone, even where another page yielded them last. Rendered pages are always fetched
  and parsed whole (their data may come from scripts whose answers changed under the same
  HTML).

Adaptive revisits: each page keeps how many of its revisits found it changed (its body's
digest was another) with those validators, and its next visit is due after an interval
between ``revisit_min`` and ``revisit_max`` set by that history (:func:`revisit_interval`):
a page that changed on every visit comes back after ``revisit_min``, one that never
changed drifts towards ``revisit_max``; a new page comes back after ``revisit_min``. A
sitemap's ``<changefreq>`` is the first guess for a page with no history yet; a sitemap
``<lastmod>`` newer than a page's last fetch makes it due at once.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

import orjson

__all__ = [
    "CHANGEFREQ",
    "Seen",
    "body_digest",
    "revisit_interval",
    "spider_fingerprint",
    "validators_of",
]


@dataclass(frozen=True, slots=True)
class Seen:
    """What a page's last fetch showed."""

    etag: str | None
    last_modified: str | None
    sha256: str
    spider: str
    url: str  # the page's URL after redirects (a page that redirected is parsed whole)
    records: tuple[str, ...]  # the ids of the records its last parse yielded
    visits: int = 0  # revisits that compared its body with the one before
    changes: int = 0  # of them, those that found another body

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
            data = orjson.loads(text)  # (a page's, each claim of a recrawl: orjson's speed)
            return cls(data.get("etag"), data.get("last_modified"), data["sha256"],
                       data["spider"], data["url"], tuple(data["records"]),
                       int(data.get("visits", 0)), int(data.get("changes", 0)))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def body_digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:32]


MAX_RECORDS = 1000  # a page that yielded more is always parsed (its ids are not kept)


def validators_of(
    headers: Mapping[str, str],
    digest: str,
    spider: str,
    url: str,
    records: Sequence[str],
    history: tuple[int, int] = (0, 0),
) -> str | None:
    """The JSON kept with a done page (``frontier.validators``); None for a page whose
    records are too many to keep the ids of. ``history``: (visits, changes)."""
    if len(records) > MAX_RECORDS:
        return None
    out: dict[str, Any] = {"sha256": digest, "spider": spider, "url": url,
                           "records": list(records)}  # fmt: skip
    if history[0]:
        out["visits"], out["changes"] = history
    etag, modified = headers.get("ETag"), headers.get("Last-Modified")
    if etag and len(etag) <= 200:
        out["etag"] = etag
    if modified and len(modified) <= 100:
        out["last_modified"] = modified
    try:
        return orjson.dumps(out).decode()  # (written for every page: orjson's speed)
    except orjson.JSONEncodeError:  # (a lone surrogate in a spider's name, say)
        return json.dumps(out, separators=(",", ":"))


#: Settings that decide how fast, how often and for how long a crawl goes, never what a
#: fetched page yields: not in the fingerprint (a crawl run again with another
#: concurrency must not download every page again in its next pass). Not ``timeout``
#: nor ``robots_unreachable_grace``: they decide whether a download's robots.txt counts
#: as unreachable, and so what a record holds (the file, or "not downloaded").
PACING = frozenset({
    "concurrency", "lease_ahead", "per_host_concurrency", "per_host_delay", "lease_seconds",
    "max_attempts", "backoff_base", "backoff_max", "unreachable_timeout", "log_interval",
    "max_pages", "max_items", "grace_seconds", "fail_fast_after", "browser_concurrency",
    "browser_recycle_pages", "browser_max_memory_mb", "render_timeout", "revisit_min",
    "revisit_max",
})  # fmt: skip


def spider_fingerprint(spider: object, settings: object) -> str:
    """A digest of what decides a page's records besides the page: the file that defines
    the spider's class, the spider's own attributes (its arguments), the crawl's settings
    but its pace (``PACING``) and crashsafe's version. Any of them changed, every page is
    parsed again. A spider whose source cannot be read gets a fingerprint of its own each
    run: never skipped."""
    cls = type(spider)
    try:
        source = inspect.getsource(inspect.getmodule(cls) or cls)
    except (OSError, TypeError):
        source = os.urandom(16).hex()
    from crashsafe import __version__

    own = sorted((k, repr(v)) for k, v in vars(spider).items())
    if is_dataclass(settings):
        decides = [(f.name, getattr(settings, f.name)) for f in fields(settings)]
        settings = [(name, value) for name, value in decides if name not in PACING]
    seed = f"{cls.__module__}.{cls.__qualname__}\n{source}\n{own}\n{settings!r}\n{__version__}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


#: A sitemap's ``<changefreq>`` as seconds: the first guess of a page's interval.
CHANGEFREQ = {
    "always": 0.0, "hourly": 3600.0, "daily": 86400.0, "weekly": 7 * 86400.0,
    "monthly": 30 * 86400.0, "yearly": 365 * 86400.0, "never": math.inf,
}  # fmt: skip


def revisit_interval(
    visits: int, changes: int, low: float, high: float, guess: float | None = None
) -> float:
    """Seconds until a page is due again, from its history: of ``visits`` revisits,
    ``changes`` found it changed. The share of visits that found a change, with one
    visit's worth of prior belief, places the interval between ``low`` and ``high`` on
    a log scale: a page that always changes gets ``low``, one that never does tends to
    ``high``. The prior is that the page changes (a new page comes back after ``low``,
    and learns from there), or the ``guess`` interval if given (a sitemap's
    ``<changefreq>``)."""
    low, high = min(low, high), max(low, high)
    if high <= low or low <= 0:
        return max(low, 0.0)
    span = math.log(high / low)
    prior = 1.0
    if guess is not None:
        clamped = min(max(guess, low), high)
        prior = 1.0 - math.log(clamped / low) / span
    rate = (max(0, min(changes, visits)) + prior) / (max(visits, 0) + 1)
    return min(max(low * math.exp((1.0 - rate) * span), low), high)
