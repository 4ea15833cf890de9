"""Which IP addresses a crawl may connect to: public ones, and the special-use ranges its
start URLs point at or its settings name.

A crawler runs inside networks that hold cloud metadata endpoints (169.254.169.254),
databases and admin panels on private addresses. A link (or a DNS name an attacker
controls) must not turn the crawler into a way in. The check runs on the addresses the
resolver returns, right before the connection, on the very addresses the client then
connects to: a name that resolves to a public address when the link is checked and to a
private one when it is fetched (DNS rebinding) is still refused. IP literals in URLs,
which the client does not resolve, are checked by :func:`crawl.fetch.fetch` itself.
"""

from __future__ import annotations

import ipaddress
import socket
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


class AddressGuard:
    """Refuses special-use addresses but for the ranges (names of :data:`RANGES`) and
    networks (CIDR) it is given."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self._hosts: dict[str, str] = {}  # host -> why it is refused ("": it is not)
        self.ranges: set[str] = set()
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
    def for_crawl(cls, allowed: Iterable[str], start_hosts: Iterable[str]) -> AddressGuard:
        """``allowed``, plus the ranges the start URLs' own hosts are in (a crawl of
        http://127.0.0.1:8000/ may connect to loopback; ``localhost`` counts as that)."""
        names = list(allowed)
        for host in start_hosts:
            address = ip_literal(host)
            if host.rstrip(".").lower() == "localhost" or host.lower().endswith(".localhost"):
                names.append("loopback")
            elif address is not None and (kind := special_use(address)) is not None:
                names.append(kind)
        return cls(names)

    def refusal(self, address: IP) -> str | None:
        """Why ``address`` is refused, or None if the crawl may connect to it."""
        kind = special_use(address)
        if kind is None or kind in self.ranges:
            return None
        if any(address in network for network in self.networks):
            return None
        return kind

    def check_host(self, host: str) -> None:
        """Refuse ``host`` if it is an IP literal the crawl may not connect to (names are
        the resolver's to check). Answers are cached: a crawl asks for the same few hosts
        on every request."""
        known = self._hosts.get(host)
        if known is None:
            address = ip_literal(host)
            known = ""
            if address is not None:
                try:
                    self.check(host, address)
                except AddressRefused as exc:
                    known = str(exc)
            if len(self._hosts) >= 10_000:
                self._hosts.clear()
            self._hosts[host] = known
        if known:
            raise AddressRefused(known)

    def check(self, host: str, address: IP) -> None:
        kind = self.refusal(address)
        if kind is not None:
            shown = host if host == str(address) else f"{host} ({address})"
            raise AddressRefused(
                f"{shown} is a {kind} address: refused (a crawl connects to public "
                f"addresses, and to special ones only if its start URLs point there or "
                f"allowed_addresses names them, e.g. --set allowed_addresses={kind})"
            )


class GuardedResolver(AbstractResolver):
    """Resolves with ``inner`` (the system's resolver by default) and keeps only the
    addresses ``guard`` allows; none left is :class:`AddressRefused`."""

    def __init__(self, guard: AddressGuard, inner: AbstractResolver | None = None) -> None:
        self.guard = guard
        self.inner = inner if inner is not None else DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self.inner.resolve(host, port, family)
        kept: list[ResolveResult] = []
        refused: list[Any] = []
        for result in results:
            address = ip_literal(result["host"])
            if address is not None and self.guard.refusal(address) is None:
                kept.append(result)
            else:
                refused.append(result["host"])
        if not kept:
            address = ip_literal(refused[0]) if refused else None
            if address is None:
                raise AddressRefused(f"{host} resolves to no address that can be checked")
            self.guard.check(host, address)
        return kept

    async def close(self) -> None:
        await self.inner.close()
