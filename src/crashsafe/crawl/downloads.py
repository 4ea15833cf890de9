"""The downloads a page asked for (``page.download(url)``), fetched before it commits.

A download is a request like a page's: through the crawl's session (its address guard,
cookies, User-Agent) and its proxy (the page's own ``meta["proxy"]``, else the crawl's),
robots.txt when the crawl obeys it, redirects followed. Where a download may go is its
own allow decision, ``allowed_download_domains``: the crawl's ``allowed_domains`` by
default, ``*`` for any public host (pictures live on CDNs); each redirect is checked too,
and special addresses stay refused but as a start URL's own host and port or by
``allowed_addresses``. A download that fails for now (timeout, connection error, 429,
5xx) fails the page for now: it is retried whole, so its records never commit without
their files. One that fails for good (404, too large, disallowed, outside the allow
decision), or whose host's robots.txt cannot be read (a hostile page could otherwise keep
failing itself that way), is stored in the record as ``{"url", "error"}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from crashsafe.crawl.addresses import AddressGuard
from crashsafe.crawl.allow import AllowList, BadLink, LinkFilter, check_allowed
from crashsafe.crawl.extract import ParseError
from crashsafe.crawl.fetch import (
    GET,
    PermanentFetchError,
    Response,
    Send,
    TransientFetchError,
    fetch,
)
from crashsafe.crawl.politeness import HostSlots
from crashsafe.crawl.requests import Request
from crashsafe.crawl.robots import Robots, RobotsUnavailable
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.spider import Page, Record
from crashsafe.effects.files import (
    File,
    FileOutsideCallback,
    FileStore,
    reference,
    replace_files,
    wanted,
)
from crashsafe.store import FileRow


class collecting:  # (a class used as a function: ``with collecting() as made``)
    """Note every :class:`File` made inside the block (a spider callback's). A class, not
    a generator: it runs around every page's callback."""

    __slots__ = ("made", "token")

    def __enter__(self) -> list[File]:
        self.made: list[File] = []
        self.token = wanted.set(self.made)
        return self.made

    def __exit__(self, *exc: object) -> None:
        wanted.reset(self.token)


def _http(target: str) -> str | None:
    return target if target.startswith(("http://", "https://")) else None


def download_allow(settings: CrawlSettings, links: LinkFilter) -> AllowList:
    """Where downloads may go: ``allowed_download_domains``, else the crawl's allow-list."""
    return AllowList.own_or(settings.allowed_download_domains, links.allow)


def _without_userinfo(url: str) -> str:
    """``url`` as it may be stored: no ``user:password@``, at most 2000 characters."""
    try:
        parts = urlsplit(url)
        return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()[:2000]
    except ValueError:
        return url.split("://", 1)[0] + "://..."


class Downloads:
    """Fetches and stores the files of one crawl's pages."""

    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        settings: CrawlSettings,
        folder: Path,
        robots: Callable[[], Robots | None],
        guard: AddressGuard | None,
        hosts: HostSlots,
        archive: Callable[[Response, Send], Awaitable[None]] | None = None,
        sends: Any = None,
        allowed: AllowList | None = None,
    ) -> None:
        self.session = session
        self.sends = sends  # a SendBuilder: a download goes through the page's proxy
        self.allowed = allowed  # None: any host
        self.settings = settings
        self.folder = folder
        self._files: FileStore | None = None
        self.robots = robots
        self.guard = guard
        self.hosts = hosts
        self.archive = archive
        self._deferred: set[int] = set()  # pages with a download left for later
        # Downloads in flight for the whole crawl: a page with 100 pictures waits its turn.
        self._slots = asyncio.Semaphore(settings.concurrency)

    @property
    def files(self) -> FileStore:
        """The files folder, opened at the first download (a crawl without any does not
        create it)."""
        if self._files is None:
            self._files = FileStore(self.folder)
        return self._files

    def left_for_later(self, page_id: int) -> bool:
        """Whether a download of page ``page_id`` was left for later (and forget it)."""
        if page_id in self._deferred:
            self._deferred.discard(page_id)
            return True
        return False

    async def resolve(
        self, items: list[Any], page: Page, made: list[File], page_id: int
    ) -> tuple[list[Any], list[FileRow]]:
        """``items`` with every File replaced by its reference (a File yielded on its own
        is dropped: its file is stored and counted all the same), and the files' rows.
        A download left for later (its host's robots.txt cannot be read) marks the page
        ``page_id`` (``left_for_later``): the page keeps no validators, so its next fetch
        is parsed whole and tries the download again (a 304 would keep the record as is).

        Raises:
            TransientFetchError: a download failed for now; retry the page.
        """
        urls = list(dict.fromkeys(f.url for f in made))
        meta = page.meta if isinstance(page.meta, dict) else {}
        proxy = {"proxy": meta["proxy"]} if "proxy" in meta else None
        try:  # one that fails for now: the others are cancelled (the page is retried)
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(self._one(page.urljoin(url), proxy, page_id)) for url in urls
                ]
        except ExceptionGroup as failed:  # the first error is the page's
            raise failed.exceptions[0] from None
        outcomes = [task.result() for task in tasks]
        done = {url: ref for url, (ref, _) in zip(urls, outcomes, strict=True)}
        rows = [row for _, row in outcomes if row is not None]
        resolved: list[Any] = []
        try:
            for item in items:
                if isinstance(item, File):
                    continue
                if isinstance(item, Record):
                    item = replace(item, data=replace_files(item.data, done))
                elif isinstance(item, dict):
                    item = replace_files(item, done)
                resolved.append(item)
        except FileOutsideCallback as exc:
            raise ParseError(str(exc)) from None
        return resolved, rows

    def _allowed(self, url: str) -> str | None:
        """``url`` if the download allow decision lets it through, else BadLink."""
        return check_allowed(url, self.allowed, "allowed_download_domains")

    async def _one(
        self, url: str, meta: dict[str, Any] | None, page_id: int
    ) -> tuple[dict[str, Any], FileRow | None]:
        if _http(url) is None:
            return {"url": url[:2000], "error": "not an http(s) URL"}, None
        try:  # what a link must pass: credentials, odd bytes, ports; and the allow decision
            self._allowed(url)
        except (BadLink, ValueError) as exc:
            return {"url": _without_userinfo(url), "error": f"not downloaded: {exc}"}, None
        robots = self.robots()
        delay = None
        if robots is not None:
            try:
                verdict = robots.check_loaded(url) or await robots.check(url)
            except RobotsUnavailable as exc:
                self._deferred.add(page_id)  # (its page: parsed whole next time)
                return {"url": url, "error": f"not downloaded: {exc}"}, None
            allowed, delay = verdict
            if not allowed:
                return {"url": url, "error": "disallowed by robots.txt"}, None
        send = GET if self.sends is None else self.sends.send(Request(url, meta=meta))
        try:
            async with self._slots, self.hosts.slot(urlsplit(url).netloc, delay):
                resp = await fetch(
                    self.session, url, self.settings, redirect_to=self._allowed,
                    guard=self.guard, max_bytes=self.settings.max_file_bytes, send=send,
                )  # fmt: skip
        except PermanentFetchError as exc:
            return {
                "url": url,
                "error": str(exc).replace("max_response_bytes", "max_file_bytes"),
            }, None
        except TransientFetchError as exc:
            raise TransientFetchError(f"download {url}: {exc}") from None
        if self.archive is not None:
            await self.archive(resp, send)
        if resp.status == 429 or resp.status >= 500:
            raise TransientFetchError(f"download {url}: HTTP {resp.status}")
        if not 200 <= resp.status < 300:
            return {"url": url, "error": f"HTTP {resp.status}"}, None
        # A full disk, a folder not writable: CrashsafeError, and the crawl stops
        # (pages.py), the page waiting with its records for the next run.
        files = self.files
        sha, path = await asyncio.to_thread(files.put, resp.body)
        content_type = resp.headers.get("Content-Type")
        size = len(resp.body)
        return reference(url, sha, path, size, content_type), FileRow(sha, size, content_type, url)
