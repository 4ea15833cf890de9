"""PostgreSQL database URLs: what crashsafe takes from them, what goes to libpq; and
psycopg's errors in words that say what to check."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from crashsafe.errors import ConfigError
from crashsafe.store import masked

SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_PASSWORD = re.compile(r"\b(password|sslpassword|passphrase)=('[^']*'|\S+)", re.IGNORECASE)
RECONNECT_FOR = 300.0  # seconds a lost server is waited for before a call fails


def split_url(url: str) -> tuple[str, str]:
    """libpq's connection URI and the schema named by ``?schema=`` (default public)."""
    conninfo, schema, _ = options_of(url)
    return conninfo, schema


def options_of(url: str) -> tuple[str, str, float]:
    """libpq's URI, then crashsafe's own parameters: ``schema`` (default public) and
    ``reconnect_seconds`` (how long a lost server is waited for, default 300)."""
    parts = urlsplit(url)
    schema, reconnect, rest = "public", str(RECONNECT_FOR), []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "schema":
            schema = value
        elif name == "reconnect_seconds":
            reconnect = value
        else:
            rest.append((name, value))
    if not SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(
            f"{masked(url)}: schema {schema!r} is not a plain lower-case name (letters, digits, _)"
        )
    try:
        seconds = float(reconnect)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ConfigError(f"{masked(url)}: reconnect_seconds={reconnect!r}: give seconds >= 0")
    scheme = "postgresql" if parts.scheme == "postgres" else parts.scheme
    # Percent-encoded (quote), never form-encoded: libpq reads a "+" as a "+", so
    # options=-c%20x=y must not come back as options=-c+x=y.
    query = urlencode(rest, quote_via=quote)
    return parts._replace(scheme=scheme, query=query).geturl(), schema, seconds


def with_schema(url: str, schema: str) -> str:
    """``url`` naming ``schema`` (replacing a ``?schema=`` it had)."""
    parts = urlsplit(url)
    options = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    return parts._replace(query=urlencode([*options, ("schema", schema)])).geturl()


def drop_schema(url: str) -> None:
    """Drop the schema ``url`` names, with everything in it (tests, the kill test)."""
    conninfo, schema = split_url(url)
    if schema == "public":
        raise ConfigError(f"{masked(url)}: refusing to drop the public schema")
    import psycopg

    with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def why(exc: BaseException, *, readonly: bool = False) -> str:
    """psycopg's error in words that say what to check (``readonly``: the command opened
    the database only to read)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = _PASSWORD.sub(r"\1=***", text)  # a DSN quoted in an error: never its password
    lower = text.lower()
    if "connection refused" in lower or "could not connect" in lower:
        return f"{text} (is PostgreSQL running there? check the host and port in --db)"
    if "does not exist" in lower and "database" in lower:
        return f"{text} (create it, e.g. `createdb NAME`, or check --db)"
    if "password authentication failed" in lower or "no password supplied" in lower:
        return f"{text} (check the user and password in --db, or PGPASSWORD)"
    if "read-only transaction" in lower:
        if readonly:
            return f"{text} (this command only reads)"
        return (
            f"{text}: the server takes no writes (a standby replica, a database set "
            "default_transaction_read_only, or one its disk filled); point --db at the "
            "primary, or make it writable"
        )
    return text
