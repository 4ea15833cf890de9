"""A crawl's page processor put together for one HTTP session: robots.txt, downloads and
their files folder, the WARC archive."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from crashsafe.crawl.addresses import AddressGuard
from crashsafe.crawl.allow import AllowList, LinkFilter
from crashsafe.crawl.downloads import Downloads, download_allow
from crashsafe.crawl.fetch import robots_download
from crashsafe.crawl.pages import PageProcessor
from crashsafe.crawl.politeness import HostSlots
from crashsafe.crawl.requests import Request
from crashsafe.crawl.robots import ROBOTS_MAX_REDIRECTS, Robots, RobotsStore
from crashsafe.crawl.sessions import CookieSync, SendBuilder
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.crawl.spider import Spider
from crashsafe.effects.files import default_folder
from crashsafe.store import Store

if TYPE_CHECKING:
    from crashsafe.crawl.archive import CrawlArchive

Call = Callable[..., Awaitable[Any]]


async def assemble(
    *,
    spider: Spider,
    settings: CrawlSettings,
    session: aiohttp.ClientSession,
    links: LinkFilter,
    sends: SendBuilder,
    cookies: CookieSync | None,
    guard: AddressGuard,
    call: Call,
    store: Store,
    crawl: str,
    owner: str,
) -> tuple[PageProcessor, CrawlArchive | None]:
    """The processor, and the archive to close when the crawl ends (None: no ``warc_dir``).
    Opening the archive repairs torn files: it is done off the event loop."""
    archive = None
    if settings.warc_dir is not None:  # (warcio is imported only then)
        from crashsafe.crawl.archive import CrawlArchive

        archive = await asyncio.to_thread(CrawlArchive, settings)
    write = None if archive is None else archive.write
    processor = PageProcessor(
        spider=spider, settings=settings, session=session, robots=None,
        hosts=HostSlots(settings.host_limit, settings.per_host_delay), links=links,
        sends=sends, cookies=cookies, guard=guard, archive=write,
    )  # fmt: skip
    folder = Path(settings.files_dir) if settings.files_dir else default_folder(store.url)
    processor.downloads = Downloads(
        session=session, settings=settings, folder=folder, robots=lambda: processor.robots,
        guard=guard, hosts=processor.hosts, archive=write, sends=sends,
        allowed=download_allow(settings, links),
    )  # fmt: skip
    from crashsafe.crawl.render import Renderer, RenderModes

    browser_allowed = AllowList.own_or(settings.browser_allowed_domains, links.allow)
    processor.renderer = Renderer(
        settings=settings, session=session, guard=guard, allowed=browser_allowed,
        send_for=sends.send, robots=lambda: processor.robots,
    )  # fmt: skip
    if settings.render:
        processor.renderer.check()  # no Chromium, no Playwright: said before any page
    if settings.render == "auto":
        processor.modes = RenderModes(await call(store.render_patterns, crawl))
    if settings.obey_robots:
        # A claim is held for one download: its timeout per redirect, and a margin.
        claim_seconds = settings.timeout * (ROBOTS_MAX_REDIRECTS + 1) + 10
        processor.robots = Robots(
            store=RobotsStore.of(call, store, crawl, owner, claim_seconds=claim_seconds),
            download=robots_download(
                session,
                settings,
                redirect_to=links.canonical,
                guard=guard,
                send_for=lambda url: sends.send(Request(url)),
            ),
            user_agent=settings.user_agent,
            backoff=functools.partial(processor.backoff, retry_after=None),
            unreachable_grace=settings.robots_unreachable_grace,
        )
    return processor, archive
