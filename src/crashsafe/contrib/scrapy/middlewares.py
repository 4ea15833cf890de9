"""The spider middleware that commits a response's output with its done mark, and the
downloader middleware that records what never reached a callback.

``CrashsafeSpiderMiddleware`` (SPIDER_MIDDLEWARES, 60: after HttpErrorMiddleware's
input check, after Depth, UrlLength and Referer have filtered the output) gathers
everything a callback yields for one response and sends the items on to the item
pipelines. Once every item of the response has come out of them, it commits the items as
the pipelines left them (record ids from ``CRASHSAFE_ITEM_KEY``; an item a pipeline
dropped is not stored), the requests the callback yielded and the response's done mark,
in one transaction. So pipelines see every item at least once (a kill before the commit
has the response fetched and its items processed again), and the store holds each
exactly once. Requests do not go to the scheduler (they are in the store, which it
leases from). A callback that raises fails its request
(the dead letter, with the traceback); a response HttpErrorMiddleware refuses is done
(404, 410) or failed (``HTTP 500``).

``CrashsafeDownloaderMiddleware`` (DOWNLOADER_MIDDLEWARES, 10: the last to see an
exception) fails a request whose download failed after RetryMiddleware gave up, and
marks done (skipped) one that Offsite or RobotsTxt middleware ignored.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Literal

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import CloseSpider, IgnoreRequest
from scrapy.http import Response
from scrapy.spidermiddlewares.httperror import HttpError

from crashsafe.contrib.scrapy.frontier import Frontier, Pending, logger
from crashsafe.errors import ConfigError
from crashsafe.store import Lease, PageOutcome
from crashsafe.store.values import Outcome

GONE = (404, 410)


def _frontier(crawler: Crawler) -> Frontier:
    frontier = getattr(crawler, "crashsafe_frontier", None)
    if frontier is None:
        raise ConfigError(
            "the crashsafe middlewares need the crashsafe scheduler: "
            'SCHEDULER = "crashsafe.contrib.scrapy.CrashsafeScheduler"'
        )
    return frontier  # type: ignore[no-any-return]


class CrashsafeSpiderMiddleware:
    """``SPIDER_MIDDLEWARES = {"crashsafe.contrib.scrapy.CrashsafeSpiderMiddleware": 60}``"""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        # Whether Scrapy's OffsiteMiddleware lets a request through (None: not looked
        # for yet; False: the crawl has none)
        self._offsite: Callable[[Request], bool] | Literal[False] | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrashsafeSpiderMiddleware:
        middleware = cls(crawler)
        crawler.signals.connect(middleware.item_scraped, signal=signals.item_scraped)
        crawler.signals.connect(middleware.item_passed, signal=signals.item_dropped)
        crawler.signals.connect(middleware.item_passed, signal=signals.item_error)
        return middleware

    def item_scraped(self, item: Any, response: Response, spider: Any = None) -> None:
        """An item came out of the pipelines: it is stored as they left it."""
        self.frontier.item_done(item, response, keep=True)

    def item_passed(self, item: Any, response: Response, **_: Any) -> None:
        """A pipeline dropped the item (DropItem) or failed on it: it is not stored."""
        self.frontier.item_done(item, response, keep=False)

    @property
    def frontier(self) -> Frontier:
        return _frontier(self.crawler)

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Spider | None = None
    ) -> Iterable[Any]:
        lease = self.frontier.lease_of(response.request) if response.request else None
        if lease is None:  # not a request of the store's (e.g. the middleware was added late)
            yield from result
            return
        yield from self._commit(lease, response, list(result))

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Spider | None = None
    ) -> AsyncIterator[Any]:
        lease = self.frontier.lease_of(response.request) if response.request else None
        if lease is None:
            async for item in result:
                yield item
            return
        output = [item async for item in result]
        for item in self._commit(lease, response, output):
            yield item

    def _commit(self, lease: Lease, response: Response, output: list[Any]) -> list[Any]:
        """Commit ``output``'s requests with the done mark once its items have been
        through the item pipelines (``Pending``); what goes on to the pipelines."""
        frontier = self.frontier
        requests = [o for o in output if isinstance(o, Request)]
        items = [o for o in output if o is not None and not isinstance(o, Request)]
        status = response.status
        offsite = 0
        if requests and (follows := self._offsite_check()):
            followed = [r for r in requests if follows(r)]
            offsite, requests = len(requests) - len(followed), followed
        try:
            links = frontier.new_urls(requests, parent=lease.url, depth=lease.depth + 1)
        except ConfigError as exc:  # a request whose meta is not JSON
            frontier.commit(PageOutcome(lease, "failed", status, str(exc)))
            logger.error("%s: %s", response.url, exc)
            return []
        kind: Outcome = "done" if 200 <= status < 400 or status in GONE or output else "failed"
        error = None if kind == "done" else f"HTTP {status}"
        if lease.grant_id in frontier.errbacked and status not in GONE:
            error = f"HTTP {status}"  # (an errback's output: the page's listing is kept)
        outcome = PageOutcome(lease, kind, status, error, links=links, links_offsite=offsite)
        pending = Pending(outcome, len(items))
        frontier.pending[lease.grant_id] = pending
        if not items:
            frontier.settle(lease.grant_id)
        return items

    def _offsite_check(self) -> Callable[[Request], bool] | Literal[False]:
        """Whether Scrapy's offsite downloader middleware lets a request through, if the
        crawl has one: the requests a callback yields are checked by it here, before
        they are stored (it would drop them when they are sent, a frontier row, a lease
        and a commit later each), with its own stats and log lines, and counted as the
        page's links offsite."""
        if self._offsite is None:
            self._offsite = False
            try:
                from scrapy.downloadermiddlewares.offsite import OffsiteMiddleware

                chain = self.crawler.engine.downloader.middleware.middlewares
            except (ImportError, AttributeError):
                return False
            found = next((m for m in chain if isinstance(m, OffsiteMiddleware)), None)
            if found is not None:
                self._offsite = _follows(found, self.crawler.spider)
        return self._offsite

    def process_spider_exception(
        self, response: Response, exception: BaseException, spider: Spider | None = None
    ) -> Iterable[Any] | None:
        frontier = self.frontier
        lease = frontier.lease_of(response.request) if response.request else None
        if lease is None:
            return None
        status = response.status
        if isinstance(exception, CloseSpider):  # Scrapy stops the crawl, as without us
            frontier.release(lease)  # (its page is fetched again by the next run)
            return None
        if isinstance(exception, HttpError):  # a status the spider does not handle
            kind: Outcome = "done" if status in GONE else "failed"
            error = None if kind == "done" else f"HTTP {status}"
            frontier.commit(PageOutcome(lease, kind, status, error))
            return []
        where = "".join(traceback.format_exception(exception, limit=-8))
        frontier.commit(PageOutcome(lease, "failed", status, where))
        logger.error("spider error on %s:\n%s", response.url, where)
        return []


def _follows(offsite: Any, spider: Spider | None) -> Callable[[Request], bool]:
    """Whether Scrapy's offsite middleware ``offsite`` lets a request through (it counts
    and logs what it filters, as when it filters a request on its way to be sent)."""
    import inspect

    check = offsite.process_request
    needs = inspect.signature(check).parameters.get("spider")
    if needs is not None and needs.default is inspect.Parameter.empty:  # (Scrapy < 2.14)
        check = functools.partial(check, spider=spider)

    def follows(request: Request) -> bool:
        try:
            check(request)
        except IgnoreRequest:
            return False
        return True

    return follows


class CrashsafeDownloaderMiddleware:
    """``DOWNLOADER_MIDDLEWARES = {"crashsafe.contrib.scrapy.CrashsafeDownloaderMiddleware":
    10}``"""

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrashsafeDownloaderMiddleware:
        return cls(crawler)

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        """The page's answer leaves the downloader for the spider (the middlewares that
        retry or redirect have let it through): a request with its lease made from now
        on (an errback's, a callback's ``engine.crawl()``) is not its retry or redirect."""
        frontier = _frontier(self.crawler)
        lease = frontier.lease_of(request)
        if lease is not None:
            frontier.answered.add(lease.grant_id)
        return response

    def process_exception(
        self, request: Request, exception: BaseException, spider: Spider | None = None
    ) -> None:
        frontier = _frontier(self.crawler)
        lease = frontier.lease_of(request)
        if lease is None:
            return None
        if isinstance(exception, IgnoreRequest):  # offsite, robots.txt: never fetched
            frontier.commit(PageOutcome(lease, "skipped", error=f"ignored: {exception}"))
        else:
            error = f"{type(exception).__name__}: {exception}"
            frontier.commit(PageOutcome(lease, "failed", error=error))
        return None  # Scrapy goes on: errback, logging
