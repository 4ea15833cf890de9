"""The named queries: every name once (a second would replace the first without a word)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crashsafe.store import queries


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_the_shipped_queries_load(dialect: str) -> None:
    assert "requeue_failed" in queries.load_queries(dialect)


def test_a_name_given_twice_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "queries.sql").write_text(
        "-- name: a\nSELECT 1;\n-- name: b\nSELECT 2;\n-- name: a\nSELECT 3;\n"
    )
    monkeypatch.setattr(queries, "SQL", tmp_path)
    with pytest.raises(ValueError, match="names two queries 'a'"):
        queries.load_queries("x")
