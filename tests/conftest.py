"""Shared fixtures: real SQLite files and real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from crashsafe.demo.shop import ShopOptions, ShopThread
from crashsafe.store import Store, open_store
from tests import pg

# No timing is asserted, Hypothesis's 200 ms deadline per example included: on a busy
# 2-core machine one checkpoint example (fsync'd writes) took 259 ms once and failed a run.
settings.register_profile("crashsafe", deadline=None)
settings.load_profile("crashsafe")


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'crawl.db'}"


@pytest.fixture
def shop() -> Iterator[Callable[..., ShopThread]]:
    """Start a demo shop: ``shop(listings=2, per_listing=5, latency_ms=0)``."""
    started: list[ShopThread] = []

    def start(**options: object) -> ShopThread:
        site = ShopThread(ShopOptions(**options))  # type: ignore[arg-type]
        site.__enter__()
        started.append(site)
        return site

    yield start
    for site in started:
        site.__exit__(None, None, None)


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A PostgreSQL database of this test session's own (tests/pg.py)."""
    yield from pg.session_database()


@pytest.fixture
def pg_url(pg_database: str) -> str:
    """A store URL on PostgreSQL with a schema of this test's own."""
    return pg.fresh_schema_url(pg_database)


@pytest.fixture(params=["sqlite", "postgres"])
def any_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database on each backend in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'any.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def sqlite_store(db_url: str) -> Iterator[Store]:
    store = open_store(db_url)
    yield store
    store.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 KiB filesystem (tmpfs), mounted for the test; needs root."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a small tmpfs needs root: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.fixture
def read_only_disk(tmp_path: Path) -> Iterator[Path]:
    """A real read-only filesystem (tmpfs mounted ro) holding a crashsafe database with
    one crawl, ``shop.db``; needs root (which a mode 0555 folder would not stop)."""
    disk = tmp_path / "ro"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a tmpfs needs root: {mounted.stderr.decode().strip()}")
    try:
        store = open_store(f"sqlite:///{disk / 'shop.db'}")
        store.enqueue("shop", [])
        store.close()
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)
