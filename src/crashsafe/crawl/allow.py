"""Where a crawl may go: one decision, made on the URL that will be fetched.

A link is checked after it is canonicalised, on the host and port that the HTTP client
will connect to, parsed by the client's own parser (yarl) from the very string that is
stored and fetched. Checking the raw link and fetching a rewritten one is how a parser
differential turns an allowed page's link into a request to another host
(``http://other\\@allowed/`` becomes ``http://other/@allowed/`` once ``\\`` is read as
``/``). Links whose authority two parsers could read differently (backslashes, control
characters, whitespace, ``user:password@``) are refused before anything else, and hosts
are kept to letters, digits, hyphens and dots after one IDNA mapping (UTS #46).

Allow-list entries (``allowed_domains``): ``host`` (on ports 80 and 443, so http → https
works), ``*.host`` (the host and its subdomains), ``host:port``, ``*.host:port``, and
``*`` (any host on 80/443; ``*:*`` any port too). The default is the start URLs' hosts
with their ports.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from yarl import URL

from crashsafe.crawl.requests import Request, callback_name, frontier_key
from crashsafe.crawl.settings import CrawlSettings
from crashsafe.errors import ConfigError
from crashsafe.ids import DOT_SEGMENT, SIMPLE_URL, canonical_url, idna_host
from crashsafe.store import NewUrl

if TYPE_CHECKING:
    from crashsafe.sealed import Sealer

CANONICAL_CACHE = 20_000  # links remembered by a LinkFilter; then its cache starts over
OUTSIDE_SAID = 100  # origins outside the allow-list a run names (DEBUG), once each
logger = logging.getLogger("crashsafe.crawl")
MAX_URL_LENGTH = 8192  # longer links are skipped (RFC 9110 8.3 recommends >= 8000)
WEB_PORTS = frozenset({80, 443})

# Only characters that may stand in an already percent-encoded URL (RFC 3986).
_ENCODED = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
# Anything two URL parsers may read differently in an authority, or a terminal may act on.
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\\u0080-\u009f\u2028\u2029]")
_LDH = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*\.?")
_NUMERIC_LABEL = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)\.?")
_IPV4 = re.compile(
    r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?:\.(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}"
)


def _plain_name(host: str) -> bool:
    """A host :func:`host_and_port` would accept as it is: LDH labels not ending in a
    number, or a plain dotted IPv4 address."""
    if _IPV4.fullmatch(host):
        return True
    if not _LDH.fullmatch(host) or len(host) > 253:
        return False
    return not _NUMERIC_LABEL.fullmatch(host.rstrip(".").rsplit(".", 1)[-1])


class BadLink(Exception):
    """A link that cannot be crawled: malformed, ambiguous, or a scheme we do not fetch."""


def client_url(url: str) -> URL:
    """The URL object the HTTP client requests for ``url``: already-encoded text is taken
    as it is (``encoded=True``, which also spares yarl re-quoting every request)."""
    return URL(url, encoded=True) if _ENCODED.fullmatch(url) else URL(url)


def check_raw(url: str) -> None:
    """Refuse what must never reach canonicalisation: over-long links, characters that
    parsers disagree on, credentials."""
    if len(url) > MAX_URL_LENGTH:
        raise BadLink(f"longer than {MAX_URL_LENGTH} characters ({len(url)})")
    bad = _UNSAFE.search(url)
    if bad is not None:
        raise BadLink(f"holds {bad.group()!r} (control character, space or backslash)")
    netloc = urlsplit(url).netloc
    if "@" in netloc:
        raise BadLink(
            "holds credentials (user:password@); crashsafe never stores them: remove them "
            "from the URL"
        )


def host_and_port(url: str) -> tuple[str, int]:
    """The host and port the client connects to for canonical ``url``; BadLink if the
    host is not a plain name or IP address."""
    target = client_url(url)
    host, port = target.raw_host, target.port
    if not host or port is None:
        raise BadLink("no host")
    if target.raw_user is not None or target.raw_password is not None:
        raise BadLink("holds credentials (user:password@)")
    if ":" in host:  # an IPv6 literal; zone ids ("%eth0") are refused
        if "%" in host:
            raise BadLink(f"host {host!r}: an IPv6 zone id is not crawlable")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise BadLink(f"host {host!r} is not an IPv6 address") from None
        return host, port
    if not _LDH.fullmatch(host) or len(host) > 253:
        raise BadLink(f"host {host!r} holds characters other than letters, digits, - and .")
    last = host.rstrip(".").rsplit(".", 1)[-1]
    if _NUMERIC_LABEL.fullmatch(last):
        try:  # ends in a number: it must be a plain dotted IPv4 address, nothing looser
            if str(ipaddress.IPv4Address(host)) != host:
                raise ValueError(host)
        except ValueError:
            raise BadLink(f"host {host!r} is not a canonical IPv4 address") from None
    return host, port


@dataclass(frozen=True, slots=True)
class Entry:
    host: str  # "" for any host
    subdomains: bool
    port: int | None  # None: 80 and 443; -1: any

    def allows(self, host: str, port: int) -> bool:
        if self.port is None:
            if port not in WEB_PORTS:
                return False
        elif self.port != -1 and self.port != port:
            return False
        if not self.host:
            return True
        return host == self.host or (self.subdomains and host.endswith("." + self.host))


def parse_entry(text: str) -> Entry:
    """One ``allowed_domains`` entry: ``host``, ``*.host``, ``host:port``, ``*``."""
    spec = text.strip().lower()
    if spec in ("*", "*:*"):
        return Entry("", True, None if spec == "*" else -1)
    try:
        parts = urlsplit(f"http://{spec}/")
        port = parts.port
        host = parts.hostname or ""
    except ValueError as exc:
        raise ConfigError(f"allowed_domains entry {text!r}: {exc}") from None
    subdomains = host.startswith("*.")
    host = host.removeprefix("*.")
    if not host or "@" in spec or "/" in spec:
        raise ConfigError(f"allowed_domains entry {text!r}: use host, *.host or host:port")
    try:
        authority = f"[{host}]" if ":" in host else idna_host(host)  # an IPv6 literal, or a name
        host, _ = host_and_port(f"http://{authority}/")
    except (BadLink, ValueError) as exc:
        raise ConfigError(f"allowed_domains entry {text!r}: {exc}") from None
    return Entry(host, subdomains, port if port not in WEB_PORTS else None)


class AllowList:
    """The hosts and ports a crawl may fetch."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries = tuple(entries)
        # Exact hosts answer from a set; only wildcard entries are walked.
        self._exact: set[tuple[str, int]] = set()
        self._walk: list[Entry] = []
        for entry in self.entries:
            if entry.host and not entry.subdomains and entry.port != -1:
                ports = WEB_PORTS if entry.port is None else {entry.port}
                self._exact.update((entry.host, port) for port in ports)
            else:
                self._walk.append(entry)

    @classmethod
    def from_settings(cls, allowed: Iterable[str] | None, start_urls: Iterable[str]) -> AllowList:
        """The ``allowed_domains`` setting, or the start URLs' hosts and ports."""
        if allowed is not None:
            entries = [parse_entry(text) for text in allowed]
            if not entries:
                raise ConfigError(
                    "allowed_domains is empty: list the hosts to crawl, or '*' for any host"
                )
            return cls(entries)
        found = []
        for url in start_urls:
            try:
                check_raw(url)
                host, port = host_and_port(canonical_url(url))
            except (BadLink, ValueError):
                continue  # the start URL itself is refused with its reason elsewhere
            found.append(Entry(host, False, None if port in WEB_PORTS else port))
        return cls(found)

    def allows(self, host: str, port: int) -> bool:
        if (host, port) in self._exact:
            return True
        return any(entry.allows(host, port) for entry in self._walk)

    @classmethod
    def own_or(cls, entries: Iterable[str] | None, default: AllowList) -> AllowList:
        """An allow-list of its own (``allowed_download_domains``,
        ``browser_allowed_domains``), or ``default`` (the crawl's) when not set."""
        return default if entries is None else cls.from_settings(entries, [])


def check_allowed(url: str, allowed: AllowList | None, setting: str) -> str:
    """``url`` if it is an http(s) URL a link may be and ``allowed`` (None: any host)
    lets its host and port through, else BadLink saying why, naming the ``setting`` that
    decides (a redirect's target is checked so too)."""
    if not url.startswith(("http://", "https://")):
        raise BadLink("not an http(s) URL")
    check_raw(url)
    host, port = host_and_port(url)
    if allowed is not None and not allowed.allows(host, port):
        raise BadLink(
            f"{host}:{port} is outside {setting} (the crawl's allowed_domains unless set; "
            "'*' allows any public host)"
        )
    return url


_BAD = "\x00bad"  # cached answer for a bad link (the reason follows)


class LinkFilter:
    """Decides which links enter the frontier, in canonical form, and which redirects are
    followed: the one allow decision of a crawl.

    Answers are cached: most pages of a site repeat the same menus, pagers and footers.
    A malformed, ambiguous or unsupported link raises :class:`BadLink` (the crawl skips
    and counts it); one that is only not wanted (another host or port, too deep) gives
    None.
    """

    def __init__(self, settings: CrawlSettings, start_urls: Iterable[str]) -> None:
        self.strip = settings.strip_query_params
        self.max_depth = settings.max_depth
        self.allow = AllowList.from_settings(settings.allowed_domains, start_urls)
        self._canonical: dict[str, str | None] = {}
        self._outside_said: set[tuple[str, int]] = set()
        self.outside = 0  # links left out for the allow-list so far (to_rows counts a page's)
        self.sealer: Sealer | None = None  # seals the secrets of the requests it stores

    def canonical(self, url: str) -> str | None:
        """The canonical form of ``url``, or None if the allow-list leaves it out.

        Raises:
            BadLink: ``url`` is malformed, ambiguous or not http(s).
        """
        cache = self._canonical
        try:
            result = cache[url]
        except KeyError:
            result = self._canonical_uncached(url)
            if len(cache) >= CANONICAL_CACHE:
                cache.clear()
            cache[url] = result
        if result is not None and result.startswith(_BAD):
            raise BadLink(result[len(_BAD) :])
        return result

    def _canonical_uncached(self, url: str) -> str | None:
        simple = SIMPLE_URL.fullmatch(url) if len(url) <= MAX_URL_LENGTH else None
        if simple is not None and not DOT_SEGMENT.search(simple[3]):
            # Most links: already canonical, a plain name and a port of digits, nothing two
            # parsers could read differently: the host and port are the regex's groups.
            # (canonical_url returns such URLs as they are.)
            host, port_text = simple[1], simple[2]
            port = int(port_text) if port_text else (443 if url[4] == "s" else 80)
            if port_text not in ("80", "443") and port <= 65535 and _plain_name(host):
                if self.allow.allows(host, port):
                    return url
                self._outside(url, host, port)
                return None
        try:
            check_raw(url)
            parts = urlsplit(url)
            if parts.scheme.lower() not in ("http", "https"):
                return f"{_BAD}unsupported scheme {parts.scheme or '(none)'!r}"
            parts.port  # noqa: B018 -- raises for a port out of range or not a number
            canonical = canonical_url(url, strip_params=self.strip)
            if len(canonical) > MAX_URL_LENGTH:
                raise BadLink(f"longer than {MAX_URL_LENGTH} characters once encoded")
            host, port = host_and_port(canonical)
        except (BadLink, ValueError) as exc:  # ValueError: UnicodeError and IDNAError too
            return f"{_BAD}{exc}"
        if self.allow.allows(host, port):
            return canonical
        self._outside(url, host, port)
        return None

    def _outside(self, url: str, host: str, port: int) -> None:
        """Say once per origin and run (DEBUG, as Scrapy's offsite filter) that URLs of
        ``host:port`` are not followed, and what would allow them."""
        said = self._outside_said
        if (host, port) not in said and len(said) < OUTSIDE_SAID:
            said.add((host, port))
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug(
                    "not following URLs of %s:%d (first: %s): outside the allow-list; %s",
                    host, port, url, self._why_outside(url),
                )  # fmt: skip

    def new_url(
        self, request: Request, depth: int, *, parent: str = "", ordinal: int = 0
    ) -> NewUrl | None:
        """``request`` as the frontier keeps it, or None if it is not wanted (another
        host, too deep). Raises BadLink for a URL that cannot be crawled, ConfigError for
        a request that cannot be stored (``meta`` that is not JSON)."""
        if self.max_depth is not None and depth > self.max_depth:
            return None
        url = self.canonical(request.url)
        if url is None:
            self.outside += 1
            return None
        key = frontier_key(url, request, parent=parent, ordinal=ordinal, sealer=self.sealer)
        callback = callback_name(request.callback)
        changed = request.meta.get("lastmod") if request.meta else None
        if not isinstance(changed, int | float) or isinstance(changed, bool):
            changed = None
        stored = request.stored(self.sealer)
        return NewUrl(key, depth, callback, request.priority, stored, changed)

    def _why_outside(self, url: str) -> str:
        """What to add to ``allowed_domains`` for ``url``, and why: a host allowed on
        other ports is the commonest case (``127.0.0.1`` means ports 80 and 443 only)."""
        try:
            host, port = host_and_port(canonical_url(url))
        except (BadLink, ValueError):
            return "add its host"
        if any(self.allow.allows(host, other) for other in (80, 443)):
            return (
                f"the host {host} is allowed, but not port {port} (a bare host means ports "
                f"80 and 443): add '{host}:{port}' to allowed_domains"
            )
        return f"add '{host}' (or '{host}:{port}') to allowed_domains"

    def start_requests(self, requests: Iterable[Request]) -> list[NewUrl]:
        """The start requests as the frontier keeps them; one that cannot be crawled is a
        ConfigError (so is one that cannot be stored)."""
        starts = []
        for n, request in enumerate(requests):
            try:
                new = self.new_url(request, 0, parent="start", ordinal=n)
            except BadLink as exc:
                raise ConfigError(f"start URL {request.url!r} cannot be crawled: {exc}") from None
            if new is None:
                raise ConfigError(f"start URL {request.url!r} is outside allowed_domains: "
                                  f"{self._why_outside(request.url)}")  # fmt: skip
            starts.append(new)
        return starts
