"""Load named queries from ``sql/<dialect>/queries.sql`` (``-- name: NAME`` blocks)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger("crashsafe.store")

#: The SQL beside this module (a plain folder: importlib.resources would import zipfile
#: and more for it, on every start).
SQL = Path(__file__).with_name("sql")


def load_queries(dialect: str) -> dict[str, str]:
    """Return ``{name: sql}`` for ``dialect``."""
    text = (SQL / dialect / "queries.sql").read_text("utf-8")
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("-- name:"):
            if name:
                queries[name] = "\n".join(lines).strip()
            name, lines = line.removeprefix("-- name:").strip(), []
            if name in queries:  # a second one would replace the first without a word
                raise ValueError(f"{dialect}/queries.sql names two queries {name!r}")
        elif name and not line.startswith("--"):
            lines.append(line)
    if name:
        queries[name] = "\n".join(lines).strip()
    return queries


def load_migrations(dialect: str) -> list[tuple[int, str]]:
    """Return ``[(version, sql)]`` from ``sql/<dialect>/NNNN_*.sql`` in order."""
    folder = SQL / dialect
    found = []
    for entry in folder.iterdir():
        stem = entry.name.split("_", 1)[0]
        if entry.name.endswith(".sql") and stem.isdigit():
            found.append((int(stem), entry.read_text("utf-8")))
    return sorted(found)


@contextmanager
def upgrade_said(where: str, current: int, latest: int) -> Iterator[None]:
    """Say on the log that an existing store's schema is being upgraded (a new store's
    creation is not news), before and after: the upgrade is one transaction, which on a
    large store (an index rebuilt over millions of rows) can take a while, and every other
    crashsafe process opening the store waits for it meanwhile."""
    if not 0 < current < latest:
        yield
        return
    logger.info(
        "upgrading %s from schema version %d to %d (one transaction: other crashsafe "
        "processes opening it wait for it)", where, current, latest,
    )  # fmt: skip
    started = time.monotonic()
    yield
    took = time.monotonic() - started
    logger.info("upgraded %s to schema version %d in %.2f s", where, latest, took)
