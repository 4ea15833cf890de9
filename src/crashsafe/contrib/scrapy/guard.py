"""The address guard for Scrapy: the crawl connects to public addresses, and to special
ones (loopback, private, link-local: cloud metadata...) only as its start URLs' own host
and port, as its proxy, or in ``CRASHSAFE_ALLOWED_ADDRESSES``; the rules of
``crashsafe/crawl/addresses.py``, which the native crawl applies.

Scrapy's OffsiteMiddleware checks names, not addresses: a link to an allowed name that
resolves to 169.254.169.254, a redirect to ``http://127.0.0.1:8080/admin`` or a proxy on
``127.0.0.1:3128`` all get through it. The guard checks the addresses themselves:

- at connect time: it wraps the reactor's name resolver (whichever ``DNS_RESOLVER`` is),
  and the connection is made only to the addresses that passed (a name rebound to a
  private address between two requests is still refused);
- before a request is sent through a proxy, which resolves the target out of sight: the
  target's name is resolved here and every address checked (a name that does not resolve
  here is refused: it could not be checked);
- on the response: ``response.ip_address`` (the address connected to) is checked again,
  for download handlers that do not use the reactor's resolver.

A refused request fails its frontier row at once (no retries), naming the address, its
range and the setting that would allow it. ``CRASHSAFE_ADDRESS_GUARD = False`` turns the
guard off.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any, NoReturn
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver
from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from twisted.internet.interfaces import IHostnameResolver, IResolutionReceiver
from zope.interface import implementer

from crashsafe.contrib.scrapy.frontier import logger
from crashsafe.crawl.addresses import AddressGuard, AddressRefused, Endpoint, ip_literal
from crashsafe.errors import ConfigError
from crashsafe.store import PageOutcome

REFUSED_META = "crashsafe_refused"  # why the resolver refused a request's addresses
SCHEMES = frozenset({"http", "https", "data"})  # data: URLs go nowhere
NOT_CHECKED = (
    "the address guard lets through http and https, whose addresses it checks "
    "(CRASHSAFE_ADDRESS_GUARD = False lets anything through)"
)


class AddressRefusedError(IgnoreRequest):
    """A request to an address the crawl may not connect to."""


def endpoint_of(url: str) -> Endpoint | None:
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None
    if not parts.hostname or port is None:
        return None
    return parts.hostname.lower(), port


@implementer(IHostnameResolver)
class GuardedNameResolver:
    """The reactor's name resolver, passing on only the addresses a guard allows (one per
    crawler of the process: the resolver does not know which crawler asks, so an address
    any of them allows passes); the reasons for the others are kept in ``refused`` by
    (host, port)."""

    def __init__(self, inner: Any, guard: AddressGuard) -> None:
        self.inner = inner
        self.guards = [guard]
        self.refused: dict[Endpoint, str] = {}

    def resolveHostName(
        self,
        resolutionReceiver: Any,
        hostName: str,
        portNumber: int = 0,
        addressTypes: Sequence[Any] | None = None,
        transportSemantics: str = "TCP",
    ) -> Any:
        guards, refused, outer = self.guards, self.refused, resolutionReceiver
        key = (hostName.strip("[]").lower(), portNumber)
        passed: list[bool] = []
        reasons: list[str] = []

        @implementer(IResolutionReceiver)
        class Checked:
            def resolutionBegan(self, resolution: Any) -> None:
                outer.resolutionBegan(resolution)

            def addressResolved(self, address: Any) -> None:
                address_text = getattr(address, "host", "")
                whys = [check(g, key[0], address_text, portNumber) for g in guards]
                why = None if None in whys else whys[0]
                if why is None:
                    passed.append(True)
                    outer.addressResolved(address)
                else:
                    reasons.append(why)

            def resolutionComplete(self) -> None:
                if reasons and not passed:  # nothing left to connect to: say why
                    if len(refused) >= 10_000:
                        refused.clear()
                    refused[key] = reasons[0]
                else:
                    refused.pop(key, None)
                outer.resolutionComplete()

        return self.inner.resolveHostName(
            Checked(), hostName, portNumber, addressTypes, transportSemantics
        )


def check(guard: AddressGuard, host: str, address: str, port: int) -> str | None:
    """Why ``host`` (at ``address``) may not be connected to on ``port``, or None."""
    if guard.is_proxy(host, port):  # the crawl's proxy, connected to as the proxy
        return None
    ip = ip_literal(address)
    if ip is None:
        return f"{host} resolves to {address!r}, which cannot be checked"
    try:
        guard.check(host, ip, port)
    except AddressRefused as exc:
        return str(exc)
    return None


class CrashsafeAddressGuard:
    """``DOWNLOADER_MIDDLEWARES = {"crashsafe.contrib.scrapy.CrashsafeAddressGuard": 950}``
    (after HttpProxyMiddleware, 750, has set the proxy; the first to see a response)."""

    def __init__(self, crawler: Crawler) -> None:
        settings = crawler.settings
        self.crawler = crawler
        allowed = settings.getlist("CRASHSAFE_ALLOWED_ADDRESSES")
        self.guard = AddressGuard(allowed)
        self.guard.setting, self.guard.option = "CRASHSAFE_ALLOWED_ADDRESSES", "-s "
        self.guard.resolver = _Resolver(self)
        self.resolver: GuardedNameResolver | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> CrashsafeAddressGuard:
        if not crawler.settings.getbool("CRASHSAFE_ADDRESS_GUARD", True):
            raise NotConfigured("CRASHSAFE_ADDRESS_GUARD is off")
        if not crawler.settings.getbool("TWISTED_REACTOR_ENABLED", True):
            raise ConfigError(
                "CRASHSAFE_ADDRESS_GUARD checks addresses in Twisted's name resolver: run "
                "with TWISTED_REACTOR_ENABLED, or set CRASHSAFE_ADDRESS_GUARD = False"
            )
        guard = cls(crawler)
        crawler.crashsafe_guard = guard  # type: ignore[attr-defined]
        crawler.signals.connect(guard.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(guard.spider_closed, signal=signals.spider_closed)
        return guard

    # -- start endpoints and the resolver --------------------------------------------------
    def allow_start(self, url: str) -> None:
        """A start URL's own host and port may be special, when the host is an IP literal
        or ``localhost`` (as in the native crawl: a name can be made to point anywhere)."""
        endpoint = endpoint_of(url)
        if endpoint is None:
            return
        fresh = AddressGuard.for_crawl((), [endpoint]).endpoints - self.guard.endpoints
        if fresh:
            self.guard.endpoints |= fresh
            self.guard.forget()  # answers given before may have changed

    def spider_opened(self, spider: Spider) -> None:
        for url in getattr(spider, "start_urls", None) or ():
            self.allow_start(str(url))
        from twisted.internet import reactor

        installed = reactor.nameResolver
        if isinstance(installed, GuardedNameResolver):  # another crawler of this process
            self.resolver = installed
            installed.guards.append(self.guard)
            return
        self.resolver = GuardedNameResolver(installed, self.guard)
        reactor.installNameResolver(self.resolver)

    def spider_closed(self, spider: Spider) -> None:
        from twisted.internet import reactor

        resolver = self.resolver
        if resolver is not None and self.guard in resolver.guards:
            resolver.guards.remove(self.guard)
            if not resolver.guards and reactor.nameResolver is resolver:
                reactor.installNameResolver(resolver.inner)

    # -- requests ---------------------------------------------------------------------------
    async def process_request(self, request: Request, spider: Spider | None = None) -> None:
        scheme = request.url.partition(":")[0].lower()
        if scheme not in SCHEMES:  # ftp:// to an IP literal never meets the resolver;
            self._refuse(request, f"{scheme}: URLs are refused: {NOT_CHECKED}")  # file://
        endpoint = endpoint_of(request.url)
        if endpoint is None:
            self._refuse(request, f"{request.url[:200]!r} names no host and port to check")
        self._allow_seed(request, endpoint[0], endpoint[1])
        proxy = request.meta.get("proxy")
        proxied = endpoint_of(proxy) if proxy else None
        if proxied is not None:  # the operator's proxy (settings, environment, meta)
            self.guard.proxies.add(proxied)
        try:
            if proxied is not None or self.guard.is_proxy(*endpoint):
                await self.guard.check_proxied(*endpoint)  # resolved and checked here
            else:
                self.guard.check_host(*endpoint)  # an IP literal; names: at connect time
        except AddressRefused as exc:
            self._refuse(request, str(exc))

    def _allow_seed(self, request: Request, host: str, port: int) -> None:
        """A request the store leased as a start URL (depth 0)."""
        frontier = getattr(self.crawler, "crashsafe_frontier", None)
        lease = frontier.lease_of(request) if frontier is not None else None
        if lease is not None and lease.depth == 0 and "redirect_urls" not in request.meta:
            self.allow_start(request.url)

    def process_exception(
        self, request: Request, exception: BaseException, spider: Spider | None = None
    ) -> None:
        """A request whose every address the resolver refused: failed at once, saying why
        (without the guard it would be a DNSLookupError, retried)."""
        endpoint = endpoint_of(request.url)
        why = self.resolver.refused.get(endpoint) if self.resolver and endpoint else None
        if why is not None and not isinstance(exception, IgnoreRequest):
            self._refuse(request, why)  # said in one line, not as a DNS error's traceback
        return None

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        address = getattr(response, "ip_address", None)
        endpoint = endpoint_of(response.url)
        if address is None or endpoint is None or request.meta.get("proxy"):
            return response  # through a proxy, the address is the proxy's
        why = check(self.guard, endpoint[0], str(address), endpoint[1])
        if why is not None:
            self._refuse(request, why, sent=True)  # (it was: the answer came from there)
        return response

    def _refuse(self, request: Request, why: str, *, sent: bool = False) -> NoReturn:
        self._commit_refused(request, why, sent=sent)
        raise AddressRefusedError(why)

    def _commit_refused(self, request: Request, why: str, *, sent: bool = False) -> None:
        """Fail the request's page; ``sent``: a request of it reached the network (this
        one, or the one it is a redirect or retry of): it counts as a request."""
        frontier = getattr(self.crawler, "crashsafe_frontier", None)
        lease = frontier.lease_of(request) if frontier is not None else None
        request.meta[REFUSED_META] = why
        logger.warning("refused %s: %s", request.url, why)
        if lease is not None:
            assert frontier is not None
            sent = sent or "redirect_urls" in request.meta or "retry_times" in request.meta
            frontier.commit(PageOutcome(lease, "failed", error=why, sent=sent))


class _Resolver(AbstractResolver):
    """Resolution for the checks made before a request goes to a proxy: the reactor's own
    resolver (the one the crawl would connect with), in aiohttp's resolver shape, which
    ``AddressGuard.check_proxied`` expects."""

    def __init__(self, owner: CrashsafeAddressGuard) -> None:
        self.owner = owner

    async def close(self) -> None:
        pass

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_UNSPEC) -> Any:
        from scrapy.utils.defer import maybe_deferred_to_future
        from twisted.internet import defer, reactor

        owner_resolver = self.owner.resolver
        inner = owner_resolver.inner if owner_resolver is not None else reactor.nameResolver
        found: list[dict[str, Any]] = []
        done: defer.Deferred[None] = defer.Deferred()

        @implementer(IResolutionReceiver)
        class Collect:
            def resolutionBegan(self, resolution: Any) -> None:
                pass

            def addressResolved(self, address: Any) -> None:
                found.append({"host": address.host, "port": address.port})

            def resolutionComplete(self) -> None:
                done.callback(None)

        inner.resolveHostName(Collect(), host, port)
        await maybe_deferred_to_future(done)
        if not found:
            raise OSError(f"no address for {host}")
        return found
