"""Crawl settings: defaults, overridden by Spider class attributes, then by the CLI."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any

from crashsafe.errors import ConfigError
from crashsafe.ids import DEFAULT_STRIP_PARAMS


@dataclass(frozen=True, slots=True)
class CrawlSettings:
    """How a crawl behaves. Every field can be set as a Spider class attribute.

    Attributes:
        concurrency: requests in flight per worker. With ``lease_ahead`` 0 a page keeps
            its slot from lease to commit, so a kill repeats at most this many pages.
        lease_ahead: URLs a worker may hold beyond ``concurrency``: leased before a
            request slot is free, or fetched and parsed while their commit is on its way.
            A kill then repeats at most ``concurrency + lease_ahead`` pages; in exchange
            no request waits for a commit or a lease round trip (faster with slow sites
            or a slow store). 0 (the default) keeps DESIGN's one-slot-per-page rule.
        per_host_concurrency: pages in flight per host, for all workers of the crawl
            together (``None``: no limit beyond each worker's ``concurrency``).
        per_host_delay: seconds between two request starts to one host, for all workers
            together (robots.txt's Crawl-delay wins when larger).
        lease_seconds: how long a worker owns a URL without renewing it; a dead worker's
            URLs come back at once through its liveness lock, or after this at the latest.
        max_attempts: attempts of one URL before it goes to the dead letter: fetches, and
            leases that lapsed or died with their worker (either may have fetched).
        backoff_base, backoff_max: retry delay ``base * 2**(attempt-1)`` with jitter,
            capped; a ``Retry-After`` header is honoured up to ``backoff_max``.
        timeout: seconds for one request, connection to last byte.
        max_redirects: redirects followed before the URL fails.
        max_response_bytes: larger responses fail the URL instead of filling memory.
        obey_robots: fetch and obey robots.txt per origin (cached in the database).
        robots_unreachable_grace: seconds a robots.txt may stay unreachable (5xx, 429,
            network errors), its origin's pages waiting with backoff, before the crawl
            goes on with the last copy read, or with no rules if none was ever read
            (RFC 9309 2.3.1.4; default 30 days).
        log_interval: seconds between two progress lines logged (``crashsafe.crawl``,
            INFO) when the crawl is not shown live on a terminal; 0: none.
        max_pages, max_items: stop this run gracefully once it has committed this many
            pages, or stored this many records (Scrapy's ``CLOSESPIDER_PAGECOUNT`` and
            ``CLOSESPIDER_ITEMCOUNT``); the same command again goes on. None: no limit.
        unreachable_timeout: seconds a run goes on once all that is left waits for
            robots.txt of unreachable origins (nothing else can be fetched); then it ends
            with exit status 5, naming them, the pages still pending for the next run.
        allowed_domains: hosts to crawl: ``host`` (ports 80 and 443), ``*.host`` (and its
            subdomains), ``host:port``, ``*`` (any host); ``None``: the start URLs' hosts
            with their ports (``docs/security.md``).
        secret_headers: header names (``*`` a wildcard) whose values are credentials
            beyond ``Authorization``, ``Cookie``, ``*-Key``, ``*-Token``... (crashsafe/
            sealed.py): sealed when a request is stored, redacted in the WARC archive.
        allowed_download_domains: where ``page.download`` may go, as ``allowed_domains``
            is written (``*``: any public host); ``None``: the crawl's allow-list.
        allowed_addresses: special-use address ranges the crawl may connect to beyond
            its start URLs' own hosts and ports: ``loopback``, ``private``, ``link-local``,
            ``shared``, ``multicast``, ``unspecified``, ``reserved`` or a network
            (``10.0.0.0/8``). Public addresses are always allowed.
        strip_query_params: query parameters dropped when URLs are canonicalised.
        max_depth: links further than this from a start URL are not followed.
        max_links_per_page: links a page may add; the rest are skipped and counted.
        user_agent: the User-Agent header, also the robots.txt agent.
        grace_seconds: on Ctrl-C/SIGTERM, time given to in-flight pages to commit.
        handle_statuses: non-2xx statuses passed to ``parse`` instead of failing.
        fail_fast_after: stop the crawl when this many pages in a row fail with the same
            spider error before any record is stored (a bug that would fail every page of
            the site); 0: never.
        cookies_enabled: keep the cookies responses set (a cookie jar per crawl, stored
            with each page's done mark, so a restarted crawl sends them again).
        default_headers: headers sent with every request (a request's own win).
        proxy: send every request through this proxy (``http://[user:pass@]host:port``);
            ``meta["proxy"]`` sets one per request; without either, the standard
            ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` variables are obeyed.
        http_user, http_pass: HTTP basic auth credentials, sent only to
            ``http_auth_domain``.
        http_auth_domain: the host (and its subdomains) basic auth is sent to; ``None``:
            the start URLs' hosts; ``"*"``: every host.
        files_dir: where ``page.download`` stores files (``ab/cd/<sha256>``); ``None``:
            ``files`` beside an SQLite database, ``./files`` for PostgreSQL.
        max_file_bytes: a larger download is not stored (the record says so).
        warc_dir: write every page and download fetched to ``.warc.gz`` files here (one
            series per worker process); ``None``: no archive.
        render: render pages in Chromium (``docs/rendering.md``): ``False`` (fetch HTML
            only), ``True`` (every page), ``"auto"`` (fetch first; render the pages where
            ``render_when_missing`` matches nothing, learning per URL pattern which way
            works). ``Request(render=...)`` decides for one request.
        render_when_missing: a CSS selector the page must hold without rendering (auto
            mode), also waited for in the rendered page.
        render_wait_for: a CSS selector waited for before a rendered page is read (else
            its ``load`` event), within ``render_timeout``.
        render_timeout: seconds a page may take in the browser (navigation, waits,
            reading the DOM); a page over it is cut and retried.
        browser_executable: the Chromium to run (``None``: ``chromium`` on PATH).
        browser_concurrency: pages rendering at once per worker.
        browser_recycle_pages: a browser context (one per origin) is replaced after
            this many pages.
        browser_max_memory_mb: the browser is restarted, once its pages are done, when its
            processes together use more memory than this (MiB of PSS: memory they share
            counted once).
        browser_block: resource types the browser does not load (Playwright's names:
            ``image``, ``font``, ``media``, ``stylesheet``...).
        browser_allowed_domains: where a rendered page's own requests (scripts, data)
            may go, as ``allowed_domains`` is written; ``None``: the crawl's allow-list.
        revisit_min, revisit_max: seconds (``-s revisit_min=2h``) between two visits of
            a page in a continuous crawl (``crawl --continuous``, ``recrawl --due``): a
            page that changed on every visit comes back after ``revisit_min``, one that
            never changes drifts towards ``revisit_max`` (crawl/revisits.py).
    """

    concurrency: int = 16
    lease_ahead: int = 0
    per_host_concurrency: int | None = None
    per_host_delay: float = 0.0
    lease_seconds: float = 60.0
    max_attempts: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 300.0
    timeout: float = 30.0
    max_redirects: int = 10
    max_response_bytes: int = 16 * 2**20
    obey_robots: bool = True
    robots_unreachable_grace: float = 30 * 24 * 3600.0
    unreachable_timeout: float = 180.0
    log_interval: float = 30.0
    max_pages: int | None = None
    max_items: int | None = None
    allowed_domains: tuple[str, ...] | None = None
    allowed_download_domains: tuple[str, ...] | None = None
    secret_headers: tuple[str, ...] = ()
    allowed_addresses: tuple[str, ...] = ()
    strip_query_params: tuple[str, ...] = DEFAULT_STRIP_PARAMS
    max_depth: int | None = None
    max_links_per_page: int = 10_000
    user_agent: str = "crashsafe/0.1"
    grace_seconds: float = 10.0
    handle_statuses: tuple[int, ...] = ()
    fail_fast_after: int = 20
    cookies_enabled: bool = True
    default_headers: tuple[tuple[str, str], ...] = ()
    proxy: str | None = None
    http_user: str | None = None
    http_pass: str | None = None
    http_auth_domain: str | None = None
    files_dir: str | None = None
    max_file_bytes: int = 50 * 2**20
    warc_dir: str | None = None
    render: bool | str = False
    render_when_missing: str | None = None
    render_wait_for: str | None = None
    render_timeout: float = 30.0
    browser_executable: str | None = None
    browser_concurrency: int = 4
    browser_recycle_pages: int = 100
    browser_max_memory_mb: int = 2048
    browser_block: tuple[str, ...] = ("image", "font", "media")
    browser_allowed_domains: tuple[str, ...] | None = None
    revisit_min: float = 3600.0
    revisit_max: float = 7 * 86400.0

    def __post_init__(self) -> None:
        positive = (
            "concurrency", "lease_seconds", "max_attempts", "timeout", "max_links_per_page",
            "max_response_bytes", "max_redirects", "max_file_bytes", "render_timeout",
            "browser_concurrency", "browser_recycle_pages", "browser_max_memory_mb",
            "revisit_min", "revisit_max",
        )  # fmt: skip
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"setting {name} must be a number > 0, got {value!r}")
        for name in ("per_host_delay", "backoff_base", "backoff_max", "grace_seconds",
                     "robots_unreachable_grace", "unreachable_timeout",
                     "log_interval"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"setting {name} must be a number >= 0, got {value!r}")
        if self.max_depth is not None and self.max_depth < 0:
            raise ConfigError(f"setting max_depth must be >= 0 (or None), got {self.max_depth!r}")
        if self.lease_ahead < 0:
            raise ConfigError(f"setting lease_ahead must be >= 0, got {self.lease_ahead!r}")
        if self.per_host_concurrency is not None and self.per_host_concurrency <= 0:
            raise ConfigError("setting per_host_concurrency must be > 0 (or None)")
        if self.render not in (True, False, "auto"):
            raise ConfigError(f"setting render must be True, False or 'auto', got {self.render!r}")
        if self.render == "auto" and not self.render_when_missing:
            raise ConfigError(
                "render='auto' needs render_when_missing: a CSS selector that only a page "
                "which needs no browser holds (e.g. render_when_missing = '.price')"
            )
        if self.revisit_max > 100 * 365 * 86400:
            raise ConfigError(
                f"setting revisit_max must be at most 100 years, got {self.revisit_max!r}"
            )
        if self.revisit_max < self.revisit_min:
            raise ConfigError(
                f"setting revisit_max ({self.revisit_max:g} s) is shorter than revisit_min "
                f"({self.revisit_min:g} s): make revisit_max the longer"
            )
        for limit in ("max_pages", "max_items"):
            if getattr(self, limit) is not None and getattr(self, limit) <= 0:
                raise ConfigError(f"setting {limit} must be > 0 (or None)")

    @property
    def host_limit(self) -> int:
        return self.per_host_concurrency or self.concurrency

    def replace(self, **changes: Any) -> CrawlSettings:
        from crashsafe.crawl.scrapy_names import unknown

        for name in sorted(set(changes) - self.names()):
            raise unknown(name, self.names())
        return dataclasses.replace(self, **changes)

    @classmethod
    def names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    @classmethod
    def parse_value(cls, name: str, text: str) -> Any:
        """Convert a CLI string (``--set name=value``) to the setting's type."""
        default = getattr(cls(), name, None) if name in cls.names() else None
        if name not in cls.names():
            from crashsafe.crawl.scrapy_names import unknown

            raise unknown(name, cls.names())
        try:
            if name == "render":
                if text.lower() not in {"1", "0", "true", "false", "yes", "no", "auto"}:
                    raise ValueError(text)
                return "auto" if text.lower() == "auto" else text.lower() in {"1", "true", "yes"}
            if isinstance(default, bool):
                if text.lower() not in {"1", "0", "true", "false", "yes", "no"}:
                    raise ValueError(text)
                return text.lower() in {"1", "true", "yes"}
            if name in {"files_dir", "warc_dir", "render_when_missing", "render_wait_for",
                        "browser_executable"}:  # fmt: skip
                return None if text.lower() in {"", "none"} else text
            if name in {"per_host_concurrency", "max_depth", "max_pages", "max_items"}:
                return None if text.lower() in {"", "none"} else int(text)
            if name in {"revisit_min", "revisit_max"}:  # 90, 90s, 15m, 2h, 1d, 1w
                from crashsafe.durations import seconds

                found = seconds(text)
                if found is None:
                    raise ValueError(text)
                return found
            if isinstance(default, int):
                return int(text)
            if isinstance(default, float):
                return float(text)
            if name == "handle_statuses":
                return tuple(int(p) for p in text.split(",") if p)
            if name in {"allowed_domains", "allowed_download_domains", "allowed_addresses",
                        "secret_headers", "browser_block", "browser_allowed_domains",
                        "strip_query_params"}:  # fmt: skip
                return tuple(p.strip() for p in text.split(",") if p.strip())
            if name == "default_headers":  # Name: value, one per --set
                header, sep, value = text.partition(":")
                if not sep or not header.strip():
                    raise ValueError(text)
                return ((header.strip(), value.strip()),)
            return text
        except ValueError:
            raise ConfigError(f"setting {name}: cannot use {text!r}") from None
