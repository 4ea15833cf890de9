"""The kill test on PostgreSQL: several workers on one frontier, each SIGKILLed on its
own, on a shop with errors, tracking parameters and duplicate links."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

pytestmark = pytest.mark.slow


def test_killtest_on_postgresql_with_workers_and_every_chaos_option(
    tmp_path: Path, pg_database: str
) -> None:
    import psycopg

    out = tmp_path / "k.json"
    result = run_cli(
        "killtest", "--db", pg_database, "--runs", "1", "--kills", "2", "--workers", "2",
        "--listings", "8", "--per-listing", "10", "--error-rate", "0.1", "--tracking",
        "--dup-links", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "crashsafe: holds" in result.stdout
    safe = json.loads(out.read_text())["runs"][0]["crashsafe"]
    assert (safe["rows"], safe["distinct"], safe["wrong"], safe["missing"]) == (80, 80, 0, 0)
    assert safe["repeated"] <= safe["bound"] == 4 * safe["kills_landed"]
    assert safe["final_exit"] == [0, 0]
    with psycopg.connect(pg_database) as conn:  # its schemas are dropped at the end
        left = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'killtest_%'"
        ).fetchone()
    assert left == (0,)


def test_killtest_refuses_a_db_that_is_not_postgresql() -> None:
    result = run_cli("killtest", "--db", "sqlite:///x.db", "--runs", "1")
    assert result.returncode != 0
    assert "give a postgresql:// database" in result.stderr and "Traceback" not in result.stderr
