"""What an errback receives when a request fails for good, named and shaped as Scrapy's
(``failure.value``, ``failure.request``, ``failure.check(HttpError)``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crashsafe.crawl.requests import Request
    from crashsafe.crawl.spider import Page

__all__ = ["Failure", "HttpError"]


class HttpError(Exception):
    """The response's status is one the spider does not handle (as Scrapy's HttpError):
    ``response`` is the page, which the errback may still read."""

    def __init__(self, response: Page) -> None:
        super().__init__(f"HTTP {response.status}")
        self.response = response


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a request failed for good, after its retries: ``value`` is the exception
    (:class:`HttpError`, or a fetch error: a timeout, a refused connection, a TLS
    handshake...), ``request`` the request, ``response`` the page when there was one."""

    value: BaseException
    request: Request
    response: Page | None = None

    def check(self, *types: type[BaseException]) -> type[BaseException] | None:
        """The first of ``types`` the exception is an instance of, or None (Twisted's)."""
        return next((t for t in types if isinstance(self.value, t)), None)

    def getErrorMessage(self) -> str:  # (Twisted's name)
        return str(self.value)

    def __str__(self) -> str:
        return f"{type(self.value).__name__}: {self.value}"

    def raiseException(self) -> Any:  # (Twisted's name)
        raise self.value
