"""Crawls from Python: :func:`crawl` (blocking) and :func:`crawl_async` (a coroutine).

The same crawl as ``crashsafe crawl``: the store is the truth, and calling it again with
the same spider and database resumes where the last call stopped (or does nothing more
once the crawl is complete). Records are read back with ``open_store(db).iter_records()``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

from crashsafe.crawl.engine import Crawler, CrawlResult
from crashsafe.crawl.spider import Spider
from crashsafe.errors import ConfigError
from crashsafe.store import open_store

__all__ = ["crawl", "crawl_async"]

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_DB = "sqlite:///crashsafe.db"


async def crawl_async(
    spider: Spider | type[Spider],
    *,
    db: str = DEFAULT_DB,
    start_urls: Sequence[str] | None = None,
    progress: bool = False,
    handle_signals: bool | None = None,
    every: str | float | None = None,
    continuous: bool = False,
    passes: int | None = None,
    **settings: Any,
) -> CrawlResult:
    """Run ``spider`` until nothing is left to crawl, in the running event loop.

    Args:
        spider: a Spider subclass or instance.
        db: where the crawl lives: ``sqlite:///path.db``, a path ending in ``.db``, or
            ``postgresql://...``.
        start_urls: replace the spider's ``start_requests()`` by GETs of these URLs.
        progress: draw the live progress line on stderr.
        handle_signals: stop gracefully on Ctrl-C/SIGTERM (default: when running in the
            main thread, as a script does; not in a notebook's or a server's loop).
        every, continuous, passes: keep running, as ``crawl --every 6h`` (a duration:
            ``"6h"`` or seconds) or ``crawl --continuous`` do, until ``passes`` passes
            have ended (docs/continuous.md).
        **settings: crawl settings (``concurrency=8``), over the spider's own.

    Returns:
        How the run ended; ``result.stats`` counts what the database holds for the crawl.

    Raises:
        ConfigError: an unknown setting, a start URL that cannot be crawled.
        StoreError: the database cannot be opened or written.
        SpiderError: the spider fails every page the same way (``fail_fast_after``).
    """
    instance = spider() if isinstance(spider, type) else spider
    if not isinstance(instance, Spider):
        raise ConfigError(f"crawl() needs a crashsafe Spider, not {type(instance).__name__}")
    resolved = type(instance).crawl_settings(**settings)
    from crashsafe.crawl.passes import schedule_of

    schedule = schedule_of(continuous, None if every is None else str(every), passes)
    if handle_signals is None:
        handle_signals = threading.current_thread() is threading.main_thread()
    store = open_store(db, create=True)
    try:
        crawler = Crawler(
            instance,
            store,
            settings=resolved,
            start_urls=start_urls,
            progress=progress,
            handle_signals=handle_signals,
            schedule=schedule,
        )
        return await crawler.run()
    finally:
        store.close()


def _blocking(run: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """``run`` as a function that blocks until its coroutine is done (on uvloop where
    installed); refused where an event loop runs already."""

    @functools.wraps(run)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise ConfigError(
                "crashsafe.crawl() blocks, and an event loop is running here (a notebook?): "
                "use `await crashsafe.crawl_async(...)` instead"
            )
        from crashsafe import aio

        return aio.run(run(*args, **kwargs))

    return blocking


crawl = _blocking(crawl_async)
crawl.__name__ = crawl.__qualname__ = "crawl"
crawl.__doc__ = """Run ``spider`` until nothing is left to crawl, and return how it ended.

The blocking form of :func:`crawl_async`, with the same arguments. In a running event loop
(Jupyter, an async server) use ``await crawl_async(...)`` instead.
"""
