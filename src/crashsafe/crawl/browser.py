"""Chromium for rendered pages: one browser per worker, driven by Playwright, started at
the first page that needs it and never outliving its worker.

- Found, not downloaded: ``browser_executable``, else ``chromium`` (Debian's package) on
  PATH; missing, the crawl stops with one line naming the install command.
- Bounded: at most ``browser_concurrency`` pages at once; one context per origin,
  replaced after ``browser_recycle_pages`` pages; the whole browser restarted, once its
  pages are done, when its processes use more than ``browser_max_memory_mb`` together
  (their PSS: memory they share counted once, where RSS would count it per process).
- Cut off: Chromium is started with a proxy that does not exist (loopback included), so
  the only way out for a page is the crawl's own session (crawl/render.py).
- Dies with its worker: Playwright's driver closes the browser when the worker's end of
  its pipe closes (a SIGKILL included); every process of the browser carries
  ``CRASHSAFE_BROWSER_OF=<worker pid>/<launch>`` in its environment, which is how
  :func:`browser_processes` (the kill tests, the memory ceiling) finds them.
- A browser that crashes (or whose driver dies, or that stops answering) fails only the
  pages it was rendering; the next page starts a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError

logger = logging.getLogger("crashsafe.crawl")

MARKER = "CRASHSAFE_BROWSER_OF"
INSTALL = "apt-get install chromium"
MEMORY_CHECK_EVERY = 8  # pages between two looks at the browser's memory
CLOSE_TIMEOUT = 5.0  # seconds a page, context or browser may take to close before it is killed
#: Where Chromium's own connections go: nowhere (nothing listens on port 1), loopback too.
NO_NETWORK = ["--proxy-server=http://127.0.0.1:1", "--proxy-bypass-list=<-loopback>"]


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


def browser_processes(owner: int | None = None, launch: int | None = None) -> dict[int, int]:
    """``{pid: memory in bytes}`` of the browser processes of worker ``owner`` (a pid;
    None: of any worker), of its launch number ``launch`` only if given, found by their
    :data:`MARKER` (``<worker pid>/<launch>``) and, for children that do not carry it, by
    their parent. Memory is the PSS (shared pages divided among the processes that share
    them), or the RSS where the kernel does not say."""
    wanted = f"\0{MARKER}=".encode()
    if owner is not None:
        wanted += f"{owner}/".encode() + (b"" if launch is None else f"{launch}\0".encode())
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
        if wanted in b"\0" + environ:
            marked.add(pid)
    tree = set(marked)
    grew = True
    while grew:  # children of the marked processes, which may have cleared their env
        grew = False
        for pid, parent in parents.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return {pid: size for pid in tree if (size := _memory(pid)) is not None}


def _memory(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@dataclass(eq=False)
class _Context:
    context: Any
    browser: Any
    pages: int = 0  # pages started in it
    open: int = 0  # pages in it now
    retired: bool = False
    idle: list[Any] = field(default_factory=list)  # open pages, waiting for the next URL


@dataclass(eq=False)
class _Launched:
    browser: Any
    driver: Any  # the Playwright that launched it
    number: int  # this worker's launch number (in its processes' MARKER)
    contexts: dict[str, _Context] = field(default_factory=dict)
    open: int = 0
    gone: bool = False  # crashed, killed or closed: forgotten by the pool


@dataclass(eq=False)
class Lent:
    """A page lent by :meth:`BrowserPool.page`. ``alone``: no other page of its context
    is open (its cookies may be reset). Set ``keep`` False when the page must not be
    reused (it failed, its script never stopped): it is closed instead."""

    page: Any
    context: Any
    launched: _Launched
    alone: bool
    keep: bool = True


class BrowserPool:
    """Pages of one worker's Chromium: ``async with pool.page(origin) as lent``."""

    def __init__(
        self,
        settings: CrawlSettings,
        *,
        user_agent: str,
        on_context: Callable[[Any], Awaitable[None]] | None = None,
    ) -> None:
        self.settings = settings
        self.on_context = on_context  # sets up each new context (its request routing)
        self.user_agent = user_agent
        self.executable = find_chromium(settings.browser_executable)
        self._start = playwright_api()
        self._playwright: Any = None
        self._current: _Launched | None = None
        self._launching = asyncio.Lock()
        self._contexts = asyncio.Lock()
        self._slots = asyncio.Semaphore(settings.browser_concurrency)
        self._pages = 0
        self._idle = 0  # pages open between two uses, in all contexts
        self._drained = asyncio.Condition()
        self._restart = False  # over the memory ceiling: restart once its pages are done
        self.launches = 0
        self._failed_launches = 0  # in a row
        self._closed = False
        self._stopping: set[asyncio.Future[None]] = set()  # drivers being stopped

    async def _browser(self) -> _Launched:
        async with self._launching:
            current = self._current
            if current is not None and self._restart:
                draining = current
                async with self._drained:  # new pages wait until its pages are done
                    await self._drained.wait_for(lambda: draining.open == 0)
                self._forget(draining)
                await self._close(draining.browser, draining)
                current = None
            if self._closed:
                raise RuntimeError("the browser pool is closed")
            if current is not None and not current.gone:
                return current
            if self._playwright is None:
                self._playwright = await self._start().start()
            launched = await self._launch(self._playwright)
            if self._closed:  # closed while it started: it goes at once
                await self._close(launched.browser, launched)
                raise RuntimeError("the browser pool is closed")
            return launched

    async def _launch(self, driver: Any) -> _Launched:
        self._restart = False  # (a crash may have come first: this one is new)
        number = self.launches + 1
        logger.info("starting Chromium (%s) for rendered pages", self.executable)
        # No crash reporter: its handler process detaches from the browser and could
        # outlive it.
        args = ["--disable-dev-shm-usage", "--disable-breakpad", *NO_NETWORK]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.append("--no-sandbox")  # Chromium's sandbox refuses to start as root
        try:
            browser = await driver.chromium.launch(
                executable_path=self.executable,
                args=args,
                env={**os.environ, MARKER: f"{os.getpid()}/{number}"},
                # Ctrl-C is the crawl's to handle (its pages get their grace period);
                # the browser goes when the crawl closes it, or with the driver.
                handle_sigint=False,
                handle_sigterm=False,
                handle_sighup=False,
            )
        except Exception as exc:
            self._failed_launches += 1
            self._playwright_lost()
            if self.launches == 0 or self._failed_launches >= 3:
                # A browser that never starts (a stub, a broken install) would fail every
                # page to the dead letter: the crawl stops instead.
                reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                raise ConfigError(
                    f"Chromium ({self.executable}) did not start: {type(exc).__name__}: "
                    f"{reason}. Check it runs (`{self.executable} --headless --version`), "
                    f"or set browser_executable; `{INSTALL}` installs Debian's"
                ) from None
            raise
        self._failed_launches = 0
        launched = _Launched(browser, driver, number)
        browser.on("disconnected", lambda _: self._lost(launched))
        self._current = launched
        self.launches = number
        return launched

    def _forget(self, launched: _Launched) -> None:
        """``launched`` is no longer the pool's (closed, crashed, killed): its idle pages
        are dropped from the count, once."""
        if not launched.gone:
            launched.gone = True
            for c in launched.contexts.values():
                self._idle -= len(c.idle)
                c.idle.clear()
        if self._current is launched:
            self._current = None

    def _lost(self, launched: _Launched) -> None:
        """Its browser disconnected: a crash, unless the pool closed it."""
        if not launched.gone and not self._closed:
            logger.warning("the browser closed unexpectedly: the pages it rendered are retried")
        self._forget(launched)

    async def _context(self, launched: _Launched, origin: str) -> _Context:
        async with self._contexts:  # one context per origin, however many pages ask at once
            ctx = launched.contexts.get(origin)
            if ctx is None or ctx.retired:
                context = await launched.browser.new_context(
                    user_agent=self.user_agent, service_workers="block", accept_downloads=False
                )
                context.set_default_timeout(self.settings.render_timeout * 1000)
                if self.on_context is not None:
                    await self.on_context(context)
                ctx = launched.contexts[origin] = _Context(context, launched.browser)
            return ctx

    async def _close(self, thing: Any, launched: _Launched) -> None:
        """Close a page, context or browser of ``launched``; one that does not close in
        :data:`CLOSE_TIMEOUT` (a stopped or hung browser) has its browser killed."""
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await thing.close()
        except TimeoutError:
            logger.warning("the browser did not answer in %gs: killing it", CLOSE_TIMEOUT)
            self._kill(launched)
        except Exception:  # already closed, or its browser gone
            pass

    def _kill(self, launched: _Launched) -> None:
        """End the processes of ``launched`` (a browser that hangs); the next page starts
        afresh, with a new driver if this one was the current."""
        for pid in browser_processes(os.getpid(), launched.number):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._forget(launched)
        if launched.driver is self._playwright:
            self._playwright_lost()

    def _playwright_lost(self) -> None:
        """Playwright's driver is gone or unusable: the next page starts a new one."""
        driver, self._playwright = self._playwright, None
        if driver is not None:
            task = asyncio.ensure_future(_stop_quietly(driver))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def check_alive(self, error: BaseException, launched: _Launched | None) -> None:
        """After ``error`` in a page of ``launched``: if that browser or its driver is
        gone, it is forgotten, and the next page launches anew (a driver that died takes
        its browser along, and says nothing)."""
        if launched is None or launched.gone:
            return
        gone = not launched.browser.is_connected() or "connection closed" in str(error).lower()
        if not gone:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    context = await launched.browser.new_context()
                    await context.close()
            except Exception:
                gone = True
        if gone:
            self._forget(launched)
            if launched.driver is self._playwright:
                self._playwright_lost()

    @contextlib.asynccontextmanager
    async def page(self, origin: str) -> AsyncIterator[Lent]:
        """A page (and its context) for a URL of ``origin``. Pages are reused: a new tab
        costs Chromium a renderer process, a navigation in an open one does not. A page
        goes back blank (``about:blank``: its document's scripts end); at most
        ``browser_concurrency`` wait open between two uses."""
        async with self._slots:
            launched = await self._browser()
            try:
                ctx = await self._context(launched, origin)
                ctx.pages += 1
                ctx.open += 1
                launched.open += 1
                try:
                    if ctx.pages >= self.settings.browser_recycle_pages:
                        ctx.retired = True  # no new pages in it; closed with its last one
                    page = None
                    while ctx.idle and page is None:
                        page = ctx.idle.pop()
                        self._idle -= 1
                        if page.is_closed():
                            page = None
                    if page is None:
                        page = await ctx.context.new_page()
                    lent = Lent(page, ctx.context, launched, alone=ctx.open == 1)
                    try:
                        yield lent
                    finally:
                        await self._put_back(lent, ctx)
                finally:
                    ctx.open -= 1
                    launched.open -= 1
                    if ctx.retired and ctx.open == 0:
                        if launched.contexts.get(origin) is ctx:
                            del launched.contexts[origin]
                        if not launched.gone:
                            self._idle -= len(ctx.idle)
                        ctx.idle.clear()
                        await self._close(ctx.context, launched)
                    self._pages += 1
                    if self._pages % MEMORY_CHECK_EVERY == 0:
                        await self._check_memory()
            finally:
                async with self._drained:
                    self._drained.notify_all()

    async def _put_back(self, lent: Lent, ctx: _Context) -> None:
        """``lent``'s page back to its context's idle pages, blank, or closed."""
        launched = lent.launched
        reuse = (
            lent.keep
            and not ctx.retired
            and not launched.gone
            and self._idle < self.settings.browser_concurrency
            and not lent.page.is_closed()
        )
        if reuse:
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await lent.page.goto("about:blank")
            except Exception:
                reuse = False
        if reuse and not launched.gone:
            ctx.idle.append(lent.page)
            self._idle += 1
        else:
            await self._close(lent.page, launched)

    async def _check_memory(self) -> None:
        ceiling = self.settings.browser_max_memory_mb * 2**20
        used = sum((await asyncio.to_thread(browser_processes, os.getpid())).values())
        if used > ceiling and not self._restart:
            self._restart = True
            logger.info(
                "the browser uses %d MiB (> browser_max_memory_mb=%d): restarting it once its "
                "pages are done", used // 2**20, self.settings.browser_max_memory_mb,
            )  # fmt: skip

    async def close(self) -> None:
        self._closed = True
        current, self._current = self._current, None
        if current is not None:
            current.gone = True
            await self._close(current.browser, current)
        if self._playwright is not None:
            await _stop_quietly(self._playwright)
            self._playwright = None
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


async def _stop_quietly(driver: Any) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await driver.stop()
