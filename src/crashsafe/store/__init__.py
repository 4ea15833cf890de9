"""Stores: where the frontier, the records and the lease history live.

``open_store(url)`` picks the backend from the URL scheme.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from crashsafe.errors import ConfigError
from crashsafe.store.base import (
    STALE,
    Backoff,
    CookieRow,
    CrawlStats,
    Delivery,
    DeliveryResult,
    Due,
    EffectStats,
    Endpoint,
    FailedDelivery,
    FailedUrl,
    FileRow,
    HighWater,
    Lease,
    NewUrl,
    PageOutcome,
    Pass,
    Politeness,
    RecordRow,
    RobotsEntry,
    RunFigures,
    Store,
    StoredCookies,
    StoredRecord,
    Waiting,
    WalState,
    WorkerInfo,
)

__all__ = [
    "STALE",
    "Backoff",
    "CookieRow",
    "CrawlStats",
    "Delivery",
    "DeliveryResult",
    "Due",
    "EffectStats",
    "Endpoint",
    "FailedDelivery",
    "FailedUrl",
    "FileRow",
    "HighWater",
    "Lease",
    "NewUrl",
    "PageOutcome",
    "Pass",
    "Politeness",
    "RecordRow",
    "RobotsEntry",
    "RunFigures",
    "Store",
    "StoredCookies",
    "StoredRecord",
    "Waiting",
    "WalState",
    "WorkerInfo",
    "masked",
    "open_store",
    "sqlite_path",
]


#: Query parameters of a database URL that carry a credential: their values are masked.
SECRET_PARAMS = frozenset({"password", "sslpassword", "sslkey", "passphrase", "token"})


def masked(url: str) -> str:
    """``url`` with its password shown as ``***``, in the user part and in a
    credential-bearing query parameter (``?password=``): for messages and logs. Anything
    else is left as written (``sqlite:////abs/x.db`` stays so)."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url.split("://", 1)[0] + "://..."
    if parts.query:
        query = "&".join(
            f"{name}=***" if name.lower() in SECRET_PARAMS else pair
            for pair in parts.query.split("&")
            for name in [pair.partition("=")[0]]
        )
        if query != parts.query:
            head, _, tail = url.partition("?")
            url = head + "?" + query + tail[len(parts.query) :]
    if not password:
        return url
    scheme, _, rest = url.partition("://")
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    host = rest[:end].rpartition("@")[2]  # the last @ ends the user part, as urlsplit reads it
    return f"{scheme}://{parts.username or ''}:***@{host}{rest[end:]}"


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite store URL (``sqlite:///x.db`` -> ``x.db``, ``sqlite:////abs/x.db``
    -> ``/abs/x.db``, or a plain path ending in ``.db``/``.sqlite``); None for any other."""
    if "://" not in url:
        return Path(url) if url.endswith((".db", ".sqlite", ".sqlite3")) else None
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.path in ("", "/"):
        return None
    return Path(parts.path[1:])


def open_store(
    url: str,
    *,
    create: bool = True,
    readonly: bool = False,
    clock: Callable[[], float] | None = None,
) -> Store:
    """Open the store at ``url``.

    ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or a plain file path
    ending in ``.db``/``.sqlite``. SQLite accepts ``?synchronous=normal`` to trade
    durability on power loss (not on a process kill) for speed.
    ``postgresql://user[:password]@host[:port]/db`` (or ``postgres://``) for many
    workers on many machines; ``?schema=name`` keeps crashsafe's tables in a schema of
    their own (created if missing); other parameters go to libpq. With ``create=False`` a
    missing database is an error instead of a new empty one; ``readonly=True`` also never
    writes (no migration; on a read-only file system too), for commands that only read.
    ``clock`` replaces the store's clock (seconds since the epoch): tests move time on
    instead of sleeping.
    """
    from crashsafe.store.sqlite import SQLiteStore

    path = sqlite_path(url)
    if "://" not in url and path is not None:
        return SQLiteStore(
            path, url=f"sqlite:///{url}", create=create, readonly=readonly, clock=clock
        )
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        if path is None:
            raise ConfigError(f"{url!r}: give a file, e.g. sqlite:///crawl.db")
        options = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(options) - {"synchronous"}
        if unknown:
            raise ConfigError(f"{url!r}: unknown option(s) {sorted(unknown)}; known: synchronous")
        return SQLiteStore(
            path,
            synchronous=options.get("synchronous", "full").lower(),
            url=url,
            create=create,
            readonly=readonly,
            clock=clock,
        )
    if parts.scheme in {"postgresql", "postgres"}:
        from crashsafe.store.postgres import PostgresStore

        return PostgresStore(url, create=create, readonly=readonly, clock=clock)
    raise ConfigError(
        f"unknown database URL {masked(url)!r}: use sqlite:///path.db or "
        "postgresql://user@host:port/db"
    )
