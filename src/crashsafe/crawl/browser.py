"""Chromium for rendered pages: one browser per worker, driven by Playwright, started at
the first page that needs it and never outliving its worker.

- Found, not downloaded: ``browser_executable``, else ``chromium`` (Debian's package) on
  PATH; missing, the crawl stops with one line naming the install command.
- Bounded: at most ``browser_concurrency`` pages at once; one context per origin,
  replaced after ``browser_recycle_pages`` pages; the whole browser restarted, once its
  pages are done, when its processes use more than ``browser_max_rss_mb`` together.
- Dies with its worker: Playwright's driver closes the browser when the worker's end of
  its pipe closes (a SIGKILL included); every process of the browser carries
  ``CRASHSAFE_BROWSER_OF=<worker pid>`` in its environment, which is how
  :func:`browser_processes` (the kill tests, the memory ceiling) finds them.
- A browser that crashes fails only the pages it was rendering; the next page starts a
  new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError

logger = logging.getLogger("crashsafe.crawl")

MARKER = "CRASHSAFE_BROWSER_OF"
INSTALL = "apt-get install chromium"
MEMORY_CHECK_EVERY = 8  # pages between two looks at the browser's memory


def find_chromium(executable: str | None) -> str:
    """The Chromium to run: ``executable`` (a path or a name on PATH), else ``chromium``
    or ``chromium-browser`` on PATH; ConfigError naming the install command if none."""
    names = [executable] if executable else ["chromium", "chromium-browser"]
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    if executable:
        raise ConfigError(
            f"browser_executable {executable!r} is not an executable file: set it to a "
            f"Chromium (e.g. /usr/bin/chromium; `{INSTALL}` installs one)"
        )
    raise ConfigError(
        f"rendering needs Chromium and none was found on PATH: `{INSTALL}` (Debian/Ubuntu), "
        "or set browser_executable=/path/to/chromium"
    )


def playwright_api() -> Any:
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        raise ConfigError(
            "rendering needs Playwright's Python package: pip install 'crashsafe[browser]' "
            f"(the browser itself comes from the system: `{INSTALL}`)"
        ) from None
    return async_playwright


def browser_processes(owner: int | None = None) -> dict[int, int]:
    """``{pid: rss bytes}`` of the browser processes of worker ``owner`` (a pid; None:
    of any worker), found by their :data:`MARKER` and, for children that do not carry
    it, by their parent."""
    wanted = f"{MARKER}=".encode() + (b"" if owner is None else f"{owner}\0".encode())
    parents: dict[int, int] = {}
    marked: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            parents[pid] = int(stat[stat.rindex(b")") + 2 :].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except (OSError, ValueError):
            continue
        if (b"\0" + wanted) in (b"\0" + environ):
            marked.add(pid)
    tree = set(marked)
    grew = True
    while grew:  # children of the marked processes, which may have cleared their env
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    page = os.sysconf("SC_PAGE_SIZE")
    sizes: dict[int, int] = {}
    for pid in tree:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                sizes[pid] = int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            continue
    return sizes


@dataclass(eq=False)
class _Context:
    context: Any
    browser: Any
    pages: int = 0  # pages started in it
    open: int = 0  # pages in it now
    retired: bool = False
    idle: list[Any] = field(default_factory=list)  # open pages, waiting for the next URL


@dataclass(eq=False)
class Lent:
    """A page lent by :meth:`BrowserPool.page`. ``fresh``: never used before (its request
    routing is not set up yet). Set ``keep`` False when the page must not be reused (it
    failed, its script never stopped): it is closed instead."""

    page: Any
    context: Any
    fresh: bool
    keep: bool = True


@dataclass(eq=False)
class _Launched:
    browser: Any
    contexts: dict[str, _Context] = field(default_factory=dict)
    open: int = 0
    crashed: bool = False


class BrowserPool:
    """Pages of one worker's Chromium: ``async with pool.page(origin) as page``."""

    def __init__(self, settings: CrawlSettings, *, user_agent: str) -> None:
        self.settings = settings
        self.user_agent = user_agent
        self.executable = find_chromium(settings.browser_executable)
        self._start = playwright_api()
        self._playwright: Any = None
        self._current: _Launched | None = None
        self._launching = asyncio.Lock()
        self._slots = asyncio.Semaphore(settings.browser_concurrency)
        self._pages = 0
        self._idle = 0  # pages open between two uses, in all contexts
        self._drained = asyncio.Condition()
        self._restart = False  # over the memory ceiling: restart once its pages are done
        self.launches = 0
        self.restarts_for_memory = 0
        self.crashes = 0
        self._closed = False

    async def _browser(self) -> _Launched:
        async with self._launching:
            if self._closed:
                raise RuntimeError("the browser pool is closed")
            current = self._current
            if current is not None and self._restart:
                draining = current
                async with self._drained:  # new pages wait until its pages are done
                    await self._drained.wait_for(lambda: draining.open == 0)
                self._restart = False
                self._current = None
                self._idle -= sum(len(c.idle) for c in current.contexts.values())
                with contextlib.suppress(Exception):
                    await current.browser.close()
                current = None
            if current is not None and not current.crashed:
                return current
            if self._playwright is None:
                self._playwright = await self._start().start()
            args = ["--disable-dev-shm-usage"]
            if hasattr(os, "geteuid") and os.geteuid() == 0:
                args.append("--no-sandbox")  # Chromium's sandbox refuses to start as root
            browser = await self._playwright.chromium.launch(
                executable_path=self.executable,
                args=args,
                env={**os.environ, MARKER: str(os.getpid())},
                # Ctrl-C is the crawl's to handle (its pages get their grace period);
                # the browser goes when the crawl closes it, or with the driver.
                handle_sigint=False,
                handle_sigterm=False,
                handle_sighup=False,
            )
            launched = _Launched(browser)
            browser.on("disconnected", lambda _: self._lost(launched))
            self._current = launched
            self.launches += 1
            return launched

    def _lost(self, launched: _Launched) -> None:
        if not launched.crashed and not self._closed and self._current is launched:
            self.crashes += 1
            logger.warning("the browser closed unexpectedly: the pages it rendered are retried")
        if not launched.crashed:
            self._idle -= sum(len(c.idle) for c in launched.contexts.values())
            for c in launched.contexts.values():
                c.idle.clear()
        launched.crashed = True
        if self._current is launched:
            self._current = None

    async def _context(self, launched: _Launched, origin: str) -> _Context:
        ctx = launched.contexts.get(origin)
        if ctx is None or ctx.retired:
            context = await launched.browser.new_context(
                user_agent=self.user_agent, service_workers="block", accept_downloads=False
            )
            context.set_default_timeout(self.settings.render_timeout * 1000)
            ctx = launched.contexts[origin] = _Context(context, launched.browser)
        return ctx

    @contextlib.asynccontextmanager
    async def page(self, origin: str) -> AsyncIterator[Lent]:
        """A page (and its context) for a URL of ``origin``. Pages are reused: a new tab
        costs Chromium a renderer process, a navigation in an open one does not. At most
        ``browser_concurrency`` pages wait open between two uses."""
        async with self._slots:
            launched = await self._browser()
            ctx = await self._context(launched, origin)
            ctx.pages += 1
            ctx.open += 1
            launched.open += 1
            if ctx.pages >= self.settings.browser_recycle_pages:
                ctx.retired = True  # no new pages in it; closed with its last one
            lent = None
            try:
                while ctx.idle and lent is None:
                    page = ctx.idle.pop()
                    self._idle -= 1
                    if not page.is_closed():
                        lent = Lent(page, ctx.context, fresh=False)
                if lent is None:
                    lent = Lent(await ctx.context.new_page(), ctx.context, fresh=True)
                try:
                    yield lent
                finally:
                    reuse = (
                        lent.keep
                        and not ctx.retired
                        and not launched.crashed
                        and self._idle < self.settings.browser_concurrency
                        and not lent.page.is_closed()
                    )
                    if reuse:
                        ctx.idle.append(lent.page)
                        self._idle += 1
                    else:
                        with contextlib.suppress(Exception):
                            await lent.page.close()
            finally:
                ctx.open -= 1
                launched.open -= 1
                if ctx.retired and ctx.open == 0:
                    if launched.contexts.get(origin) is ctx:
                        del launched.contexts[origin]
                    self._idle -= len(ctx.idle)
                    ctx.idle.clear()
                    with contextlib.suppress(Exception):
                        await ctx.context.close()
                self._pages += 1
                if self._pages % MEMORY_CHECK_EVERY == 0:
                    await self._check_memory()
                async with self._drained:
                    self._drained.notify_all()

    async def _check_memory(self) -> None:
        ceiling = self.settings.browser_max_rss_mb * 2**20
        used = sum((await asyncio.to_thread(browser_processes, os.getpid())).values())
        if used > ceiling and not self._restart:
            self._restart = True
            self.restarts_for_memory += 1
            logger.info(
                "the browser uses %d MiB (> browser_max_rss_mb=%d): restarting it once its "
                "pages are done", used // 2**20, self.settings.browser_max_rss_mb,
            )  # fmt: skip

    async def close(self) -> None:
        self._closed = True
        current, self._current = self._current, None
        if current is not None:
            with contextlib.suppress(Exception):
                await current.browser.close()
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await self._playwright.stop()
            self._playwright = None
