"""The store contract suite runs once per backend; each backend says where its database
is and how to make a page's commit fail half-way. Every store a test opens shares one
:class:`ManualClock`: leases lapse and backoffs end when the test moves it on."""

from __future__ import annotations

import contextlib
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from crashsafe.store import Store, open_store
from tests import pg
from tests.clock import ManualClock


class Backend(Protocol):
    name: str
    url: str

    def fail_done_mark(self, url: str) -> None:
        """Make marking ``url`` done raise inside the commit transaction."""

    def count(self, table: str) -> int:
        """The rows of ``table``, counted behind the store's back."""


class SQLiteBackend:
    name = "sqlite"

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "contract.db"
        self.url = f"sqlite:///{self.path}"

    def fail_done_mark(self, url: str) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute(
                "CREATE TRIGGER inject_failure BEFORE UPDATE OF state ON frontier "
                f"WHEN NEW.state = 'done' AND NEW.url = '{url}' "
                "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            )

    def count(self, table: str) -> int:
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


class PostgresBackend:
    name = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url

    def fail_done_mark(self, url: str) -> None:
        with pg.connect(self.url) as db:
            db.execute(
                "CREATE FUNCTION inject_failure() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$"
            )
            db.execute(
                "CREATE TRIGGER inject_failure BEFORE UPDATE OF state ON frontier "
                f"FOR EACH ROW WHEN (NEW.state = 'done' AND NEW.url = '{url}') "
                "EXECUTE FUNCTION inject_failure()"
            )

    def count(self, table: str) -> int:
        with pg.connect(self.url) as db:
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SQLiteBackend(tmp_path)
    if request.param == "postgres":
        return PostgresBackend(request.getfixturevalue("pg_url"))
    raise AssertionError(request.param)  # pragma: no cover


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def open_stores(backend: Backend, clock: ManualClock) -> Iterator[Callable[[], Store]]:
    """Open as many stores on the backend's database as a test needs."""
    opened: list[Store] = []

    def make() -> Store:
        store = open_store(backend.url, clock=clock)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(open_stores: Callable[[], Store]) -> Store:
    return open_stores()


PYTHON = sys.executable


def worker_script(url: str, body: str) -> str:
    """A worker process on ``url`` that runs ``body`` (``s``: its store, ``o``: its owner
    id), prints what ``body`` leaves in ``out`` and waits to be killed."""
    return (
        "import time; from crashsafe.store import open_store\n"
        f"s = open_store({url!r}); o = s.register_worker('c')\n"
        f"{body}\n"
        "print(out, flush=True); time.sleep(600)\n"
    )
