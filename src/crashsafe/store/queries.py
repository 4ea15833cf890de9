"""Load named queries from ``sql/<dialect>/queries.sql`` (``-- name: NAME`` blocks)."""

from __future__ import annotations

from pathlib import Path

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
