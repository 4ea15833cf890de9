"""An existing store's schema upgrade is said on the log, before and after: it runs as one
transaction, which on a large store can take a while, and every other process opening
the store waits for it. A new store's creation says nothing; a PostgreSQL worker that
waits for another's upgrade says what it waits for."""

from __future__ import annotations

import logging
import threading
import zlib
from pathlib import Path

import pytest

from crashsafe.store import open_store
from crashsafe.store import postgres as pg_store
from crashsafe.store import sqlite as sqlite_store
from crashsafe.store.postgres_urls import split_url
from tests import pg
from tests.helpers import wait_for


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "crashsafe.store"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_an_upgrade_is_said_before_and_after_and_a_creation_is_not(
    backend: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="crashsafe.store")
    if backend == "sqlite":
        url, module = f"sqlite:///{tmp_path / 'old.db'}", sqlite_store
    else:
        url, module = str(request.getfixturevalue("pg_url")), pg_store
    latest = module.MIGRATIONS[-1][0]
    with monkeypatch.context() as m:
        m.setattr(module, "MIGRATIONS", module.MIGRATIONS[:-2])
        open_store(url, create=True).close()
    assert not [line for line in said(caplog) if "upgrad" in line]  # (a creation)

    open_store(url).close()
    upgrading, upgraded = [line for line in said(caplog) if "upgrad" in line]
    assert upgrading.startswith("upgrading ")
    assert f"from schema version {latest - 2} to {latest}" in upgrading
    assert upgraded.startswith("upgraded ") and f"to schema version {latest} in " in upgraded

    caplog.clear()
    open_store(url).close()  # current: nothing to say
    assert not [line for line in said(caplog) if "upgrad" in line]


def test_a_worker_waiting_for_anothers_upgrade_says_so(
    pg_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="crashsafe.store")
    with monkeypatch.context() as m:  # an older schema: this opener has an upgrade to do
        m.setattr(pg_store, "MIGRATIONS", pg_store.MIGRATIONS[:-1])
        open_store(pg_url, create=True).close()
    _, schema = split_url(pg_url)
    space = zlib.crc32(schema.encode()) & 0x7FFFFFFF  # (the store's advisory lock space)
    opened = threading.Event()

    def open_it() -> None:
        open_store(pg_url).close()
        opened.set()

    with pg.connect(pg_url) as other:  # another process, in the middle of an upgrade
        other.execute("SELECT pg_advisory_lock(%s, 0)", (space,))
        opener = threading.Thread(target=open_it, daemon=True)
        opener.start()
        wait_for(lambda: any(line.startswith("waiting for another") for line in said(caplog)))
        assert not opened.is_set()  # it does wait
        other.execute("SELECT pg_advisory_unlock(%s, 0)", (space,))
        opener.join(timeout=30)
    assert opened.is_set()
    [waiting] = [line for line in said(caplog) if line.startswith("waiting for another")]
    assert waiting.startswith("waiting for another crashsafe process creating or upgrading")
    assert f"schema={schema}" in waiting  # (which store)


def test_opening_a_current_schema_takes_no_lock_and_waits_for_nobody(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="crashsafe.store")
    open_store(pg_url).close()
    _, schema = split_url(pg_url)
    space = zlib.crc32(schema.encode()) & 0x7FFFFFFF
    opened = threading.Event()

    def open_it() -> None:
        open_store(pg_url).close()  # (create=True, as `crawl` opens it)
        opened.set()

    with pg.connect(pg_url) as other:  # another worker opening it at the same moment
        other.execute("SELECT pg_advisory_lock(%s, 0)", (space,))
        opener = threading.Thread(target=open_it, daemon=True)
        opener.start()
        opener.join(timeout=60)
        assert opened.is_set()  # it did not wait for the lock
        other.execute("SELECT pg_advisory_unlock(%s, 0)", (space,))
    assert not [line for line in said(caplog) if line.startswith("waiting for another")]
