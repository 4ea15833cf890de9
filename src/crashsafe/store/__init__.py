"""Stores: where the frontier, the records and the lease history live.

``open_store(url)`` picks the backend from the URL scheme.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from crashsafe.errors import ConfigError
from crashsafe.store.base import (
    STALE,
    AuditEntry,
    Backoff,
    Control,
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
    PassFigures,
    PassTurn,
    PausedOrigin,
    Politeness,
    Pruned,
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
    "AuditEntry",
    "Backoff",
    "Control",
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
    "PassFigures",
    "PassTurn",
    "PausedOrigin",
    "Politeness",
    "Pruned",
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


#: Parameters of a database URL (or DSN) that carry a credential: their values are masked.
SECRET_PARAMS = frozenset({"password", "sslpassword", "sslkey", "passphrase", "token"})
_KEYWORD_SECRET = re.compile(
    r"(?i)\b((?:ssl|pg)?password|passphrase|token)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#]+)"
)


def masked(url: str) -> str:
    """``url`` with its credentials shown as ``***``: the password of the user part
    (everything between the user's ``:`` and the last ``@``, whatever it holds: a ``#``,
    ``/`` or ``?`` in a password must not turn it into a fragment, path or query), and the
    values of credential parameters, in a query (``?password=``, percent-encoded names
    too) or a keyword DSN (``host=h password=x``). For messages and logs: it may mask more
    than the password, never less. Anything else is left as written."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if sep and "@" in rest:
        userinfo, _, host = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        if colon and "/" not in user:
            rest = f"{user}:***@{host}"
    head, question, query = rest.partition("?")
    if question:
        pairs = []
        for pair in query.split("&"):
            name, equals, _ = pair.partition("=")
            secret = equals and unquote(name).strip().lower() in SECRET_PARAMS
            pairs.append(f"{name}=***" if secret else pair)
        rest = head + "?" + "&".join(pairs)
    text = scheme + sep + rest
    return _KEYWORD_SECRET.sub(lambda m: f"{m[1]}{m[2]}***", text)


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
            raise ConfigError(
                f"{masked(url)!r}: unknown option(s) {sorted(unknown)}; known: synchronous"
            )
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
