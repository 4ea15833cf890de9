"""The store contract suite runs once per backend; each backend says how to open a store
on one shared database and how to make a page's commit fail half-way."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crashsafe.store import Store, open_store


class SQLiteBackend:
    name = "sqlite"

    def __init__(self, tmp_path: Path) -> None:
        self.url = f"sqlite:///{tmp_path / 'contract.db'}"
        self.path = tmp_path / "contract.db"

    def fail_done_mark(self, url: str) -> None:
        """Make marking ``url`` done raise inside the commit transaction."""
        with sqlite3.connect(self.path) as db:
            db.execute(
                "CREATE TRIGGER inject_failure BEFORE UPDATE OF state ON frontier "
                f"WHEN NEW.state = 'done' AND NEW.url = '{url}' "
                "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            )

    def worker_script(self) -> str:
        return (
            "import sys, time; from crashsafe.store import open_store\n"
            f"s = open_store({self.url!r}); o = s.register_worker()\n"
            "print(o, len(s.lease('c', o, 3, 3600)), flush=True); time.sleep(600)\n"
        )


@pytest.fixture(params=["sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> SQLiteBackend:
    if request.param == "sqlite":
        return SQLiteBackend(tmp_path)
    raise AssertionError(request.param)  # pragma: no cover


@pytest.fixture
def open_stores(backend: SQLiteBackend) -> Iterator[Callable[[], Store]]:
    """Open as many stores on the backend's database as a test needs."""
    opened: list[Store] = []

    def make() -> Store:
        store = open_store(backend.url)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


@pytest.fixture
def store(open_stores: Callable[[], Store]) -> Store:
    return open_stores()


PYTHON = sys.executable
