"""Which IP addresses a crawl may connect to: public ones; special-use ones only as its
start URLs' own host and port, as its proxy's own host and port (and then only as the
proxy), or in the ranges its settings name (``allowed_addresses``).

A crawler runs inside networks that hold cloud metadata endpoints (169.254.169.254),
databases and admin panels on private addresses. A link (or a DNS name an attacker
controls) must not turn the crawler into a way in. The check runs on the addresses the
resolver returns, right before the connection, on the very addresses the client then
connects to: a name that resolves to a public address when the link is checked and to a
private one when it is fetched (DNS rebinding) is still refused. IP literals in URLs,
which the client does not resolve, are checked by :func:`crawl.fetch.fetch` itself; so
are the targets of requests sent through a proxy, whose names the proxy resolves: the
crawl resolves them itself and checks every address first (a name it cannot resolve is
refused: it could not be checked).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterable
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from crashsafe.crawl.fetch_errors import PermanentFetchError
from crashsafe.errors import ConfigError

IP = ipaddress.IPv4Address | ipaddress.IPv6Address
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")  # carrier-grade NAT (RFC 6598)
RANGES = ("loopback", "private", "link-local", "shared", "multicast", "unspecified", "reserved")


class AddressRefused(PermanentFetchError):
    """The host resolves only to addresses the crawl may not connect to."""


def special_use(address: IP) -> str | None:
    """The special-use range ``address`` is in (one of :data:`RANGES`), or None if it is
    a public address."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified:
        return "unspecified"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "shared"
    if address.is_private:
        return "private"
    if address.is_reserved or not address.is_global:
        return "reserved"
    return None


def ip_literal(host: str) -> IP | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


Endpoint = tuple[str, int]  # (host as in the URL, lower-cased; port)
NAMES_CHECKED_FOR = 60.0  # seconds a proxied target's checked addresses are trusted


class AddressGuard:
    """Refuses special-use addresses but for the ranges (names of :data:`RANGES`) and
    networks (CIDR) it is given, and for the ``endpoints`` (host, port) it is given: a
    start URL's own host and port may be special (a crawl of http://127.0.0.1:8000/ may
    connect to 127.0.0.1:8000, and to nothing else on loopback). ``proxies`` are the
    endpoints of the crawl's proxies, reachable only as proxies."""

    def __init__(
        self,
        allowed: Iterable[str] = (),
        *,
        endpoints: Iterable[Endpoint] = (),
        proxies: Iterable[Endpoint] = (),
    ) -> None:
        self._hosts: dict[Endpoint, str] = {}  # endpoint -> why it is refused ("": it is not)
        self.endpoints = {(h.strip("[]").lower(), p) for h, p in endpoints}
        self.proxies = {(h.strip("[]").lower(), p) for h, p in proxies}
        self.resolver: AbstractResolver | None = None  # set by GuardedResolver
        self._names: dict[Endpoint, tuple[float, str]] = {}  # proxied targets checked
        self.ranges: set[str] = set()
        self.setting, self.option = "allowed_addresses", "--set "  # named in refusals
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for item in allowed:
            name = item.strip().lower()
            if name in RANGES:
                self.ranges.add(name)
                continue
            try:
                self.networks.append(ipaddress.ip_network(name, strict=False))
            except ValueError:
                raise ConfigError(
                    f"allowed_addresses entry {item!r}: use a range name "
                    f"({', '.join(RANGES)}) or a network such as 10.0.0.0/8"
                ) from None

    @classmethod
    def for_crawl(
        cls,
        allowed: Iterable[str],
        start_origins: Iterable[Endpoint],
        proxies: Iterable[Endpoint] = (),
    ) -> AddressGuard:
        """``allowed``, the start URLs' own hosts and ports as endpoints when the host is
        an IP literal or ``localhost`` (a crawl of http://127.0.0.1:8000/ may connect
        there; of http://localhost:8000/, to what ``localhost`` resolves to, on port
        8000; a start URL's other names get nothing special: a name can be made to point
        anywhere), and the proxies' endpoints."""
        endpoints = [
            (host, port)
            for host, port in start_origins
            if ip_literal(host) is not None
            or host.rstrip(".").lower() == "localhost"
            or host.rstrip(".").lower().endswith(".localhost")
        ]
        return cls(allowed, endpoints=endpoints, proxies=proxies)

    def refusal(self, address: IP, endpoint: Endpoint | None = None) -> str | None:
        """Why ``address`` is refused, or None if the crawl may connect to it (as
        ``endpoint``, the host and port asked for, when given)."""
        kind = special_use(address)
        if kind is None or kind in self.ranges:
            return None
        if any(address in network for network in self.networks):
            return None
        if endpoint is not None:
            host, port = endpoint[0].strip("[]").lower(), endpoint[1]
            if (host, port) in self.endpoints or (str(address), port) in self.endpoints:
                return None
        return kind

    def check_host(self, host: str, port: int | None = None) -> None:
        """Refuse ``host`` if it is an IP literal the crawl may not connect to on ``port``
        (names are the resolver's to check). Answers are cached: a crawl asks for the same
        few hosts on every request."""
        key = (host, port if port is not None else -1)
        known = self._hosts.get(key)
        if known is None:
            address = ip_literal(host)
            known = ""
            if address is not None:
                try:
                    self.check(host, address, port)
                except AddressRefused as exc:
                    known = str(exc)
            if len(self._hosts) >= 10_000:
                self._hosts.clear()
            self._hosts[key] = known
        if known:
            raise AddressRefused(known)

    def forget(self) -> None:
        """Forget the answers given: the endpoints allowed have changed."""
        self._hosts.clear()
        self._names.clear()

    def check_proxy(self, host: str, port: int | None) -> None:
        """A proxy of the crawl's own (the ``proxy`` setting, the environment's) may be
        special, as itself; any other (``meta["proxy"]``) is checked as a target is."""
        if port is not None and (host.strip("[]").lower(), port) in self.proxies:
            return
        self.check_host(host, port)

    def is_proxy(self, host: str, port: int) -> bool:
        return (host.strip("[]").lower(), port) in self.proxies

    async def check_proxied(self, host: str, port: int | None) -> None:
        """Check the target of a request sent through a proxy, which will resolve its name
        unseen: resolve it here and refuse it if any address it has is refused, or if it
        does not resolve here (it could not be checked). Checked names are trusted for
        ``NAMES_CHECKED_FOR`` seconds."""
        if ip_literal(host) is not None:
            self.check_host(host, port)
            return
        key = (host.lower(), port if port is not None else -1)
        now = time.monotonic()
        known = self._names.get(key)
        if known is None or now - known[0] > NAMES_CHECKED_FOR:
            known = (now, await self._check_name(host, port))
            if len(self._names) >= 10_000:
                self._names.clear()
            self._names[key] = known
        if known[1]:
            raise AddressRefused(known[1])

    async def _check_name(self, host: str, port: int | None) -> str:
        resolver = self.resolver or DefaultResolver()
        try:
            results = await resolver.resolve(host, port or 0, socket.AF_UNSPEC)
        except OSError as exc:
            return (
                f"{host} does not resolve here ({exc}): through a proxy, crashsafe checks "
                "each target's addresses itself before sending, and cannot check this one"
            )
        for result in results:
            address = ip_literal(result["host"])
            if address is None:
                return f"{host} resolves to an address that cannot be checked"
            try:
                self.check(host, address, port)
            except AddressRefused as exc:
                return str(exc)
        return ""

    def check(self, host: str, address: IP, port: int | None = None) -> None:
        kind = self.refusal(address, None if port is None else (host, port))
        if kind is not None:
            shown = host if host == str(address) else f"{host} ({address})"
            raise AddressRefused(
                f"{shown} is a {kind} address: refused (a crawl connects to public "
                f"addresses, and to special ones only if its start URLs point there or "
                f"{self.setting} names them, e.g. {self.option}{self.setting}={kind})"
            )


class GuardedResolver(AbstractResolver):
    """Resolves with ``inner`` (the system's resolver by default) and keeps only the
    addresses ``guard`` allows; none left is :class:`AddressRefused`."""

    def __init__(self, guard: AddressGuard, inner: AbstractResolver | None = None) -> None:
        self.guard = guard
        self.inner = inner if inner is not None else DefaultResolver()
        guard.resolver = self.inner  # (the guard resolves proxied targets with it)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        if self.guard.is_proxy(host, port):  # the crawl's own proxy, named: as itself
            return results
        kept: list[ResolveResult] = []
        refused: list[Any] = []
        for result in results:
            address = ip_literal(result["host"])
            if address is not None and self.guard.refusal(address, (host, port)) is None:
                kept.append(result)
            else:
                refused.append(result["host"])
        if not kept:
            address = ip_literal(refused[0]) if refused else None
            if address is None:
                raise AddressRefused(f"{host} resolves to no address that can be checked")
            self.guard.check(host, address, port)
        return kept

    async def close(self) -> None:
        await self.inner.close()
