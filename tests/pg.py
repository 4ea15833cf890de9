"""The PostgreSQL that tests use: the local server (127.0.0.1:5432, user postgres, trust
auth; ``CRASHSAFE_TEST_PG`` names another), a database of this test session's own, and
a fresh schema per test (``?schema=``), so tests never see each other's rows.

Without a reachable server the PostgreSQL tests skip, saying why; with ``CI=true`` they
fail instead: CI must run them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

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

    from crashsafe.store.postgres_urls import split_url

    conninfo, schema = split_url(url)
    return psycopg.connect(conninfo, autocommit=True, options=f"-c search_path={schema}")


class PrivateCluster:
    """A PostgreSQL server of the test's own (initdb in a temporary folder, a free port),
    for tests that restart or kill the server: never the machine's shared one. As root it
    runs as the ``postgres`` user, as PostgreSQL requires."""

    def __init__(self) -> None:
        import shutil
        import socket
        import tempfile

        self.bin = _pg_bin()
        self.root = Path(tempfile.mkdtemp(prefix="crashsafe-pg-"))
        self.data = self.root / "data"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._as: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        import subprocess

        cmd = [*self._as, str(self.bin / tool), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                  str(self.root / "log"), "-w", "-t", "60", "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """``fast``: a clean shutdown (sessions cut); ``immediate``: as if it crashed."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def close(self) -> None:
        import shutil

        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _pg_bin() -> Path:
    """The folder of initdb and pg_ctl (Debian keeps them out of PATH)."""
    import shutil

    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not versions:
        unavailable("initdb/pg_ctl not found: install the PostgreSQL server binaries")
    return versions[-1].parent


def private_cluster() -> Iterator[PrivateCluster]:
    try:
        cluster = PrivateCluster()
        cluster.start()
    except (RuntimeError, OSError) as exc:
        unavailable(f"cannot start a private cluster: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()
