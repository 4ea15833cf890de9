"""What ends a leased request where no middleware of crashsafe's sees it.

An exception a downloader middleware raises in ``process_response`` (Scrapy's own
``IgnoreRequest("max redirections reached")``, a body past ``DOWNLOAD_MAXSIZE`` once
gunzipped, a middleware of the user's that skips what it does not want) passes no other
middleware's hook: Scrapy hands it to the request's errback, or drops it without a word.
So every request the scheduler hands out carries :class:`Settles` as its errback, which
settles the page (if its lease is still held here) and then calls the spider's own
errback, if it has one, as before.

An ``IgnoreRequest`` skips the page, as one raised in ``process_request`` does (robots.txt,
offsite), unless Scrapy's own redirect or decompression middleware raised it: a redirect
loop, a body too large, the page's failure (the dead letter), as the native crawl fails
them. Any other exception fails the page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scrapy.exceptions import IgnoreRequest

from crashsafe.store import PageOutcome

if TYPE_CHECKING:
    from twisted.python.failure import Failure

    from crashsafe.contrib.scrapy.frontier import Frontier

#: Scrapy's middlewares whose ``IgnoreRequest`` means the page could not be had.
GAVE_UP = (
    "scrapy/downloadermiddlewares/redirect.py",
    "scrapy/downloadermiddlewares/httpcompression.py",
)


class Settles:
    """A leased request's errback (``wrapped``: the spider's own, or None)."""

    def __init__(self, frontier: Frontier, wrapped: Callable[..., Any] | None) -> None:
        self.frontier = frontier
        self.wrapped = wrapped
        self.__wrapped__ = wrapped  # (what inspect and functools look for)
        self.__name__ = getattr(wrapped, "__name__", "crashsafe_settles")

    def __deepcopy__(self, memo: dict[int, Any]) -> Settles:
        return self  # (a request copied whole shares it: the frontier is not to be copied)

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        # A request pickled (as a spider may) keeps the spider's errback only: the
        # frontier holds locks and timers, and its lease means nothing elsewhere.
        return original, (self.wrapped,)

    def __call__(self, failure: Failure) -> Any:
        frontier = self.frontier
        request = getattr(failure, "request", None)
        lease = frontier.lease_of(request) if request is not None else None
        if lease is not None and lease.grant_id in frontier.answered:
            # An answer the spider middlewares refused (HttpErrorMiddleware: a 500) goes to
            # the errback, its output committed as the page's: not a parse of the page.
            frontier.errbacked.add(lease.grant_id)
        # (held and not answered: no middleware of crashsafe's saw how the request ended)
        elif lease is not None:
            exc = failure.value
            if isinstance(exc, IgnoreRequest) and not _scrapy_gave_up(failure):
                frontier.commit(PageOutcome(lease, "skipped", error=f"ignored: {exc}"))
            else:
                error = f"{type(exc).__name__}: {exc}"
                frontier.commit(PageOutcome(lease, "failed", error=error))
        if self.wrapped is None:
            return failure  # as without an errback: Scrapy logs it (or not) as ever
        return self.wrapped(failure)


def original(errback: Any) -> Any:
    """The spider's own errback behind ``errback`` (itself, if not a :class:`Settles`)."""
    return errback.wrapped if isinstance(errback, Settles) else errback


def _scrapy_gave_up(failure: Failure) -> bool:
    """Whether Scrapy's redirect or decompression middleware raised the failure's
    exception (read from its frames: the innermost one raised it)."""
    frames = getattr(failure, "frames", None) or []
    if frames:
        where = str(frames[-1][1])
    else:  # (a failure without its frames: the exception's own traceback)
        tb = getattr(failure.value, "__traceback__", None)
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        where = "" if tb is None else tb.tb_frame.f_code.co_filename
    return where.replace("\\", "/").endswith(GAVE_UP)
