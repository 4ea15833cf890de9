"""Turn one lease into one PageOutcome: robots → host slot → fetch → classify → parse.

The rules for statuses (DESIGN.md): 2xx (and ``handle_statuses``) are parsed; 404/410
are done with no record; 429, 5xx, timeouts and connection errors are retried with
backoff, honouring ``Retry-After``; anything else fails the URL. A page is never marked
done on a status nobody handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import time
import traceback
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from crashsafe.crawl.addresses import AddressGuard
from crashsafe.crawl.allow import client_url
from crashsafe.crawl.downloads import Downloads, collecting
from crashsafe.crawl.extract import (
    ItemKeyMissing,
    LinkFilter,
    ParseError,
    item_keyer,
    run_callback,
    run_errback,
    to_rows,
)
from crashsafe.crawl.failure import Failure, HttpError
from crashsafe.crawl.fetch import (
    REDIRECTS,
    PermanentFetchError,
    Response,
    Send,
    TransientFetchError,
    fetch,
)
from crashsafe.crawl.fetch_errors import TLSFetchError
from crashsafe.crawl.politeness import HostSlots
from crashsafe.crawl.render import Renderer, RenderFailed, RenderModes, pattern_of
from crashsafe.crawl.requests import Request, callback_name, request_from_row
from crashsafe.crawl.revisits import (
    CHANGEFREQ,
    Seen,
    body_digest,
    revisit_interval,
    spider_fingerprint,
    validators_of,
)
from crashsafe.crawl.robots import Robots, RobotsUnavailable
from crashsafe.crawl.sessions import CookieSync, SendBuilder, cookie_rows
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.sitemaps import MAX_SITEMAP_ENTRIES, SitemapError
from crashsafe.crawl.spider import SITEMAP_CALLBACK, Page, Spider
from crashsafe.errors import ConfigError, FolderUnwritable
from crashsafe.logs import fields
from crashsafe.retry_after import retry_after_seconds
from crashsafe.sealed import is_secret_header
from crashsafe.store import Backoff, FileRow, Lease, PageOutcome
from crashsafe.store.values import storable
from crashsafe.text import printable, without_secrets
from crashsafe.tracing import span

logger = logging.getLogger("crashsafe.crawl")
requests_log = logging.getLogger("crashsafe.crawl.requests")

GONE = frozenset({404, 410})


def status_rule(status: int, handle_statuses: Collection[int]) -> str:
    """What a crawl does with a response of ``status`` (DESIGN.md): ``parse`` it (2xx and
    ``handle_statuses``), ``redirect`` (one not followed: done, no record), ``retry`` it
    later (429, 5xx), ``gone`` (404, 410: done, no record), or ``fail`` it."""
    if status in handle_statuses:
        return "parse"
    if status in REDIRECTS:
        return "redirect"
    if status == 429 or status >= 500:
        return "retry"
    if status in GONE:
        return "gone"
    return "parse" if 200 <= status < 300 else "fail"


def not_handled(status: int) -> str:
    return f"HTTP {status} (add it to handle_statuses to parse such pages)"


BODY_EXCERPT = 200  # characters of a failed response's body kept with its error


def body_excerpt(body: bytes, secrets: Iterable[str] = ()) -> str:
    """``; body: {"error": "token expired"}``: the first bytes of a response that failed,
    whitespace collapsed and control characters escaped, so that a 400 can be
    understood from the dead letter (empty for an empty body); ``secrets``, what the
    request sent that is secret, left out (a site may echo its headers)."""
    secrets = list(secrets)
    # (read past the excerpt by the longest secret: one cut in half is not redacted)
    longest = 4 * max(map(len, secrets), default=0)
    text = " ".join(body[: BODY_EXCERPT * 4 + longest].decode("utf-8", "replace").split())
    if not text:
        return ""
    text = without_secrets(text, secrets)
    cut = "..." if len(text) > BODY_EXCERPT else ""
    return f"; body: {printable(text[:BODY_EXCERPT])}{cut}"


SKIPPED_LOGGED = 10  # skipped links written to stderr per run; all are counted in status


class PageProcessor:
    """Fetches and parses leased URLs for one crawl."""

    def __init__(
        self,
        *,
        spider: Spider,
        settings: CrawlSettings,
        session: aiohttp.ClientSession,
        robots: Robots | None,
        hosts: HostSlots,
        links: LinkFilter,
        sends: SendBuilder,
        cookies: CookieSync | None = None,
        guard: AddressGuard | None = None,
        rng: random.Random | None = None,
        downloads: Downloads | None = None,
        archive: Callable[[Response, Send], Awaitable[None]] | None = None,
        renderer: Renderer | None = None,
        modes: RenderModes | None = None,
    ) -> None:
        self.spider = spider
        self.renderer = renderer  # set when the crawl may render pages
        #: A recrawl: a page asks for changes only, from what its lease says its last
        #: fetch showed (``Lease.seen``, read by the claim).
        self.asks_changes = False
        self.fingerprint = spider_fingerprint(spider, settings)
        self.modes = modes or RenderModes()
        self.tracer: Any = None  # OpenTelemetry (crashsafe/tracing.py): spans when set
        self.sends = sends
        self.cookies = cookies
        self.item_key = item_keyer(spider)
        self.settings = settings
        self.session = session
        self.robots = robots
        self.hosts = hosts
        self.links = links
        self.guard = guard
        self.rng = rng or random.Random()
        self.downloads = downloads
        self.archive = archive
        self.skipped_logged = 0
        self.cut_logged = 0  # pages cut by max_links_per_page said so
        self.spider_worked = False  # some page gave records without an error
        self._same_error = ("", 0)  # the spider error the first pages failed with, times
        self.broken: str | None = None  # set: the spider fails every page the same way
        # set: a folder of ours cannot be written (files, WARC): the crawl stops, the page
        # waits for the next run
        self.halted: str | None = None
        # set: pages cannot be handled here as asked (no browser to render): the crawl
        # stops with it, the page waits for the next run
        self.unrunnable: str | None = None

    def backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        if retry_after is not None:
            return min(retry_after, s.backoff_max)
        delay = Backoff(s.backoff_base, s.backoff_max).delay(attempt)
        return delay * self.rng.uniform(0.5, 1.5)  # jitter: retries of a burst spread out

    def _retry(
        self, lease: Lease, error: str, status: int | None = None, retry_after: float | None = None
    ) -> PageOutcome:
        attempt = lease.attempts + 1
        if attempt >= self.settings.max_attempts:
            return PageOutcome(
                lease, "failed", status, f"{error} (gave up after {attempt} attempts)"
            )
        delay = self.backoff(attempt, retry_after)
        return PageOutcome(lease, "retry", status, error, retry_in=delay)

    def _secrets_sent(self, request: Request) -> list[str]:
        """What ``request`` sent that is secret: credential headers (its own, the crawl's
        defaults, basic auth), its cookies and the jar's, its proxy's password. Kept out
        of the dead letter when an error body echoes them."""
        s = self.settings
        send = self.sends.send(request)
        found = [
            value
            for headers in (dict(s.default_headers), request.headers or {})
            for name, value in headers.items()
            if is_secret_header(name, s.secret_headers)
        ]
        found += [str(v) for v in (request.cookies or {}).values()]
        jar = self.session.cookie_jar.filter_cookies(client_url(request.url))
        # (a session's; not "true" or "en-US", which a body holds for other reasons)
        found += [m.value for m in jar.values() if len(m.value) >= 8]
        parts = urlsplit(request.url)
        if send.auth is not None and (auth := send.auth(parts.hostname or "", parts.port)):
            found.append(auth.partition(" ")[2])  # (basic: base64 of user:password)
        if send.proxy and (password := urlsplit(send.proxy).password):
            found.append(password)
        if s.http_pass:
            found.append(s.http_pass)
        return found

    async def _fetch(self, request: Request, on_request: Callable[[], None]) -> Response:
        on_request()
        send = self.sends.send(request)
        debug = requests_log.isEnabledFor(logging.DEBUG)
        started = time.monotonic() if debug else 0.0
        with span(self.tracer, "crawl.fetch", **{"http.request.method": send.method}) as s:
            resp = await fetch(
                self.session,
                request.url,
                self.settings,
                redirect_to=self.links.canonical,
                guard=self.guard,
                send=send,
            )
            if s is not None:
                s.set_attribute("http.response.status_code", resp.status)
                s.set_attribute("http.response.body.size", len(resp.body))
        if debug:
            ms = (time.monotonic() - started) * 1000
            requests_log.debug(
                "%s %s -> %d (%d bytes, %.0f ms)", send.method, request.url, resp.status,
                len(resp.body), ms,
                extra=fields(method=send.method, url=request.url, status=resp.status,
                             bytes=len(resp.body), ms=round(ms, 1)),
            )  # fmt: skip
        if self.archive is not None:
            await self.archive(resp, send)
        return resp

    async def process(self, lease: Lease, on_request: Callable[[], None]) -> PageOutcome:
        """Fetch and parse ``lease``; ``on_request`` is called just before the request.

        Never raises (but for cancellation): whatever goes wrong ends as a retry with
        backoff or a failure, which counts an attempt (DESIGN rule 5), or, while the
        origin's robots.txt is unreachable, as a deferral, which does not.
        """
        if lease.attempts >= self.settings.max_attempts:
            return PageOutcome(
                lease,
                "failed",
                error=f"gave up: {lease.attempts} attempts already made (requests lost to "
                "crashes, stops or lapsed leases count too)",
                revisit_in=self._interval(lease, 0, 0, learns=False),
            )
        try:
            outcome = await self._process(lease, on_request)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug of ours, an input nobody foresaw
            where = traceback.format_exc(limit=-3)
            return self._retry(lease, f"internal error: {type(exc).__name__}: {exc}\n{where}")
        if outcome.revisit_in is None and outcome.kind in ("done", "skipped", "failed"):
            # no digest to learn from (an error, a redirect, a rendered page, a page that
            # failed): the middle interval, or what the sitemap that listed it guessed
            outcome = replace(outcome, revisit_in=self._interval(lease, 0, 0, learns=False))
        return outcome

    def _interval(self, lease: Lease, visits: int, changes: int, learns: bool = True) -> float:
        s = self.settings
        guess = None if learns else math.sqrt(s.revisit_min * s.revisit_max)
        if lease.request is not None and '"changefreq"' in lease.request:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                meta = json.loads(lease.request).get("meta") or {}
                guess = CHANGEFREQ.get(str(meta.get("changefreq", "")).lower())
        return revisit_interval(visits, changes, s.revisit_min, s.revisit_max, guess)

    async def _process(self, lease: Lease, on_request: Callable[[], None]) -> PageOutcome:
        try:
            request = request_from_row(lease.url, lease.callback, lease.request, self.links.sealer)
        except ConfigError as exc:  # its secrets cannot be opened (no key, another key)
            return PageOutcome(lease, "failed", error=f"{exc}; then `crashsafe retry`")
        url = request.url
        delay = None
        if self.robots is not None:
            verdict = self.robots.check_loaded(url)
            if verdict is None:
                try:
                    verdict = await self.robots.check(url)
                except RobotsUnavailable as exc:
                    later = exc.retry_at - self.robots.clock() + self.rng.uniform(0.0, 1.0)
                    return PageOutcome(lease, "deferred", error=str(exc), retry_in=later)
                except TLSFetchError as exc:
                    return await self._give_up(request, self._retry(lease, str(exc)), exc)
            allowed, delay = verdict
            if not allowed:
                return PageOutcome(lease, "skipped", error="disallowed by robots.txt")
        mode = self._render_mode(request)
        seen = prior = None
        sent = request
        if (
            self.asks_changes
            and mode is None
            and request.method == "GET"
            and (not request.body_bytes)
        ):  # a recrawl: ask for the page only if it changed
            prior = Seen.parse(lease.seen)
            if prior is not None and prior.spider == self.fingerprint and prior.url == request.url:
                seen = prior
                sent = replace(request, headers={**(request.headers or {}), **seen.conditional()})
        try:
            if self.hosts.needed(self.settings.concurrency, delay):
                async with self.hosts.slot(urlsplit(url).netloc, delay):
                    resp = await self._fetch(sent, on_request)
            else:
                resp = await self._fetch(sent, on_request)
        except TransientFetchError as exc:
            return await self._give_up(request, self._retry(lease, str(exc)), exc)
        except PermanentFetchError as exc:
            failed = PageOutcome(lease, "failed", error=str(exc), sent=not exc.unsent)
            return await self._give_up(request, failed, exc)
        except FolderUnwritable as exc:  # the WARC archive cannot be written
            return self._halt(lease, exc)
        if resp.set_cookies and self.cookies is not None:
            self.cookies.received(resp.set_cookies)
        status = resp.status
        cookies = cookie_rows(resp.set_cookies) if resp.set_cookies else ()
        if seen is not None and status == 304 and resp.url == seen.url:  # not modified
            headers = {"ETag": resp.headers.get("ETag") or seen.etag or "",
                       "Last-Modified": resp.headers.get("Last-Modified")
                       or seen.last_modified or ""}  # fmt: skip
            history = (seen.visits + 1, seen.changes)
            return PageOutcome(
                lease, "done", status, cookies=cookies, revisit="not-modified", body_bytes=0,
                validators=validators_of(headers, seen.sha256, self.fingerprint, seen.url,
                                         seen.records, history),
                kept=seen.records, revisit_in=self._interval(lease, *history),
            )  # fmt: skip
        rule = status_rule(status, self.settings.handle_statuses)
        digest = None
        if rule == "parse" and mode is None:
            digest = body_digest(resp.body)
            if seen is not None and seen.sha256 == digest and resp.url == seen.url:
                history = (seen.visits + 1, seen.changes)
                return PageOutcome(  # the same body: not parsed, its records yielded again
                    lease, "done", status, cookies=cookies, revisit="unchanged",
                    body_bytes=len(resp.body), kept=seen.records,
                    validators=validators_of(resp.headers, digest, self.fingerprint, resp.url,
                                             seen.records, history),
                    revisit_in=self._interval(lease, *history),
                )  # fmt: skip
        if rule == "redirect":
            target = resp.headers.get("Location", "")
            return PageOutcome(lease, "done", status, f"redirect to {target} not followed")
        page = Page(
            url=resp.url,
            status=status,
            headers=resp.headers,
            body=resp.body,
            depth=lease.depth,
            request=request,
        )
        if rule == "retry":
            wait = retry_after_seconds(resp.headers.get("Retry-After"))
            excerpt = body_excerpt(resp.body, self._secrets_sent(request))
            retry = self._retry(lease, f"HTTP {status}{excerpt}", status, wait)
            return await self._give_up(request, retry, HttpError(page), page)
        if rule == "gone":
            return PageOutcome(lease, "done", status)
        if rule == "fail":
            error = not_handled(status) + body_excerpt(resp.body, self._secrets_sent(request))
            failed = PageOutcome(lease, "failed", status, error)
            return await self._give_up(request, failed, HttpError(page), page)
        rendered = None
        render_note = None
        if mode is not None and "html" in (resp.headers.get("Content-Type") or "html").lower():
            pattern = pattern_of(resp.url)
            need = mode == "browser" or self.modes.straight_to_browser(pattern)
            if not need:
                need = not page.css(self.settings.render_when_missing or "*")
            if need:
                if self.renderer is None:
                    raise RuntimeError("a page to render, and no renderer")
                try:
                    rendered = await self.renderer.render(resp, request)
                except RenderFailed as exc:
                    return await self._give_up(request, self._retry(lease, str(exc)), exc)
                except PermanentFetchError as exc:  # a rendered DOM over the size cap
                    failed = PageOutcome(lease, "failed", status, str(exc))
                    return await self._give_up(request, failed, exc, page)
                except ConfigError as exc:  # no Chromium, no Playwright: the crawl stops
                    self.unrunnable = self.unrunnable or str(exc)
                    return PageOutcome(lease, "deferred", error=str(exc), retry_in=0.0)
                resp = rendered.response
                page = Page(url=resp.url, status=status, headers=resp.headers, body=resp.body,
                            depth=lease.depth, request=request)  # fmt: skip
                page.browser = rendered.page
                if self.cookies is not None:
                    self.cookies.received(resp.set_cookies)
            if mode == "auto":
                # Counted for the browser only when it made the page whole: a page the
                # browser did not help (sold out, say) must not send its pattern there.
                helped = need and bool(page.css(self.settings.render_when_missing or "*"))
                self.modes.saw(pattern, helped)
                render_note = (pattern, helped)
        if rendered is None:
            try:
                outcome = await self._parse(lease, page, resp, render_note)
            finally:  # (a download left for later: no validators, so parsed whole next time)
                later = self._left_for_later(lease)
            if (
                digest is not None
                and outcome.kind == "done"
                and outcome.error is None
                and not later
            ):
                ids = [r.id for r in outcome.records]
                history = (0, 0)  # a first fetch, or a page that moved: no history
                if prior is not None and prior.url == resp.url:  # a revisit that compared
                    history = (prior.visits + 1, prior.changes + (prior.sha256 != digest))
                validators = validators_of(
                    resp.headers, digest, self.fingerprint, resp.url, ids, history
                )
                outcome = replace(outcome, validators=validators, body_bytes=len(resp.body),
                                  revisit_in=self._interval(lease, *history))  # fmt: skip
            return outcome
        try:
            outcome = await self._parse(lease, page, resp, render_note)
            if outcome.kind == "done" and rendered.later_cookies is not None:
                set_later = await rendered.later_cookies()  # the callback drove the page
                if set_later:
                    if self.cookies is not None:
                        self.cookies.received(set_later)
                    rows = [*outcome.cookies, *cookie_rows(set_later)]
                    outcome = replace(outcome, cookies=rows)
            return outcome
        finally:
            self._left_for_later(lease)  # (forgotten: a rendered page keeps no validators)
            await rendered.close()

    def _left_for_later(self, lease: Lease) -> bool:
        return self.downloads is not None and self.downloads.left_for_later(lease.frontier_id)

    async def _parse(
        self,
        lease: Lease,
        page: Page,
        resp: Response,
        render_note: tuple[str, bool] | None,
    ) -> PageOutcome:
        status = resp.status
        files: Sequence[FileRow] = ()
        try:
            with span(self.tracer, "crawl.parse"), collecting() as made:
                items = await run_callback(self.spider, page, lease.callback)
            if made:
                if self.downloads is None:
                    raise ParseError("page.download() needs a crawl with a files folder")
                try:
                    items, files = await self.downloads.resolve(
                        items, page, made, lease.frontier_id
                    )
                except FolderUnwritable as exc:  # the files folder cannot be written
                    return self._halt(lease, exc)
            rows = to_rows(
                items,
                page=page,
                source=self.spider.name,
                links=self.links,
                max_links=self._max_links(lease.callback),
                parent=lease.url,
                item_key=self.item_key,
            )
        except TransientFetchError as exc:  # a download: the page waits with its records
            return self._retry(lease, str(exc))
        except ItemKeyMissing as exc:
            self.broken = self.broken or str(exc)  # every page would fail the same way
            return PageOutcome(lease, "failed", status, str(exc))
        except ParseError as exc:
            return self._spider_failed(lease, status, str(exc))
        except SitemapError as exc:  # ours, and said in one line: no traceback to read
            return PageOutcome(lease, "failed", status, f"sitemap {page.url}: {exc}")
        except asyncio.CancelledError:
            raise
        except BaseException:  # SystemExit, KeyboardInterrupt, GeneratorExit from a spider too
            return self._spider_failed(lease, status, traceback.format_exc(limit=-8))
        if rows.records:
            self.spider_worked = True
        if rows.skipped:
            self._log_skipped(page.url, rows.skipped)
        if rows.links_cut and self.cut_logged < SKIPPED_LOGGED:
            self.cut_logged += 1
            logger.warning(
                "%s held %d links beyond max_links_per_page=%d: not followed",
                printable(page.url),
                rows.links_cut,
                self._max_links(lease.callback),
            )
        return PageOutcome(
            lease,
            "done",
            status,
            records=rows.records,
            links=rows.links,
            links_skipped=rows.links_skipped,
            links_cut=rows.links_cut,
            links_offsite=rows.links_offsite,
            cookies=cookie_rows(resp.set_cookies) if resp.set_cookies else (),
            files=files,
            render=render_note,
        )

    async def _give_up(
        self,
        request: Request,
        outcome: PageOutcome,
        exc: BaseException,
        page: Page | None = None,
    ) -> PageOutcome:
        """``outcome`` as it is, unless it fails the page for good and the request has an
        errback: then the errback is called with a :class:`Failure`, and what it yields is
        stored with the page, done (the failure kept as the page's error), as Scrapy hands
        an errback the requests its retries gave up on."""
        if outcome.kind != "failed" or request.errback is None:
            return outcome
        lease = outcome.lease
        failure = Failure(exc, request, page)
        name = callback_name(request.errback) or ""
        base = page or Page(url=request.url, status=0, headers={}, body=b"", depth=lease.depth,
                            request=request)  # fmt: skip
        try:
            items = await run_errback(self.spider, name, failure)
            rows = to_rows(
                items, page=base, source=self.spider.name, links=self.links,
                max_links=self._max_links(lease.callback), parent=lease.url,
                item_key=self.item_key,
            )  # fmt: skip
        except asyncio.CancelledError:
            raise
        except ParseError as exc2:
            return replace(outcome, error=f"{outcome.error}; errback {name}: {exc2}")
        except BaseException:
            where = traceback.format_exc(limit=-8)
            return replace(outcome, error=f"{outcome.error}; errback {name} raised:\n{where}")
        return PageOutcome(
            lease, "done", outcome.http_status, outcome.error, records=rows.records,
            links=rows.links, links_skipped=rows.links_skipped, links_cut=rows.links_cut,
            links_offsite=rows.links_offsite, sent=outcome.sent,
        )  # fmt: skip

    def _halt(self, lease: Lease, exc: FolderUnwritable) -> PageOutcome:
        """A folder of ours cannot be written (a full disk, no permission): stop the
        crawl (``halted``) and put the page back for the next run, no attempt counted
        (a disk full for five runs must not send the pages to the dead letter)."""
        self.halted = self.halted or str(exc)
        return PageOutcome(lease, "deferred", error=str(exc), retry_in=0.0)

    def _render_mode(self, request: Request) -> str | None:
        """``browser``, ``auto``, or None (fetch only) for ``request``."""
        if request.render is not None:
            return "browser" if request.render else None
        setting = self.settings.render
        return "auto" if setting == "auto" else "browser" if setting else None

    def _max_links(self, callback: str | None) -> int:
        if callback == SITEMAP_CALLBACK:  # a sitemap may list 50 000 URLs (sitemaps.org)
            return max(self.settings.max_links_per_page, MAX_SITEMAP_ENTRIES)
        return self.settings.max_links_per_page

    def _spider_failed(self, lease: Lease, status: int, error: str) -> PageOutcome:
        """The page fails; if, before any record was stored, pages fail the same way
        ``fail_fast_after`` times in a row, the spider is ``broken`` (the crawl stops
        rather than fail every page of the site)."""
        limit = self.settings.fail_fast_after
        if not self.spider_worked and limit:
            last = error.strip().splitlines()[-1] if error.strip() else ""
            seen, times = self._same_error
            self._same_error = (last, times + 1 if last == seen else 1)
            if self._same_error[1] >= limit and self.broken is None:
                self.broken = (
                    f"the spider failed {limit} pages in a row with the same error, before "
                    f"any record was stored: {last}. Fix the spider, then `crashsafe retry` "
                    "puts those pages back and the same crawl command resumes "
                    "(fail_fast_after sets the count)"
                )
        return PageOutcome(lease, "failed", status, error)

    def _log_skipped(self, url: str, skipped: list[str]) -> None:
        for text in skipped:
            if self.skipped_logged >= SKIPPED_LOGGED:
                return
            self.skipped_logged += 1
            more = " (no more of these are shown)" if self.skipped_logged == SKIPPED_LOGGED else ""
            logger.warning("%s", printable(storable(f"skipped link {text} on {url}{more}")))
