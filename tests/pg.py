"""The PostgreSQL that tests use: the local server (127.0.0.1:5432, user postgres, trust
auth; ``CRASHSAFE_TEST_PG`` names another), a database of this test session's own, and
a fresh schema per test (``?schema=``), so tests never see each other's rows.

Without a reachable server the PostgreSQL tests skip, saying why; with ``CI=true`` they
fail instead: CI must run them.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

SERVER = os.environ.get("CRASHSAFE_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
_schemas = itertools.count(1)


def admin_url(database: str) -> str:
    return SERVER.rsplit("/", 1)[0] + "/" + database


def unavailable(reason: str) -> None:
    """Skip (or, in CI, fail) a test that needs PostgreSQL."""
    message = f"PostgreSQL at {SERVER} is not usable: {reason}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " (CI=true: these tests must run)")
    pytest.skip(message)


def session_database() -> Iterator[str]:
    """Create a database for this test session; yield its URL; drop it at the end."""
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install -e '.[dev]')")
    name = f"crashsafe_test_{os.getpid()}"
    try:
        admin = psycopg.connect(SERVER, autocommit=True, connect_timeout=5)
    except psycopg.Error as exc:
        unavailable(str(exc).strip().splitlines()[0])
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield admin_url(name)
    finally:
        with psycopg.connect(SERVER, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fresh_schema_url(database_url: str) -> str:
    """A URL of ``database_url`` with a schema no test has used (created on first open)."""
    return f"{database_url}?schema=t{os.getpid()}_{next(_schemas)}"


def connect(url: str):  # type: ignore[no-untyped-def]
    """A plain psycopg connection to the database and schema of a store ``url``."""
    import psycopg

    from crashsafe.store.postgres import split_url

    conninfo, schema = split_url(url)
    return psycopg.connect(conninfo, autocommit=True, options=f"-c search_path={schema}")
