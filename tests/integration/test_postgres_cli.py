"""The CLI on PostgreSQL: clear one-line errors, and a password in --db never printed."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from crashsafe.demo.shop import ShopThread
from tests.helpers import CLI, cli_env, run_cli
from tests.integration.test_cli import crawl_args

SECRET = "s3cretpw9f2"  # (no hyphen: help text may wrap at one)


def with_password(pg_url: str) -> str:
    """The same database with a password (trust auth ignores it)."""
    return pg_url.replace("postgres@", f"postgres:{SECRET}@", 1)


@pytest.mark.parametrize("where", ["userinfo", "query"])
def test_a_password_in_the_database_url_is_never_printed(
    shop: Callable[..., ShopThread], pg_url: str, where: str
) -> None:
    import subprocess

    # (#24 item 5: a password given as ?password= was shown in errors)
    db = with_password(pg_url) if where == "userinfo" else f"{pg_url}&password={SECRET}"
    site = shop(listings=1, per_listing=3, error_rate=1.0, error_attempts=99)
    outputs = [
        run_cli(*crawl_args(site, db, "--max-attempts", "1")),  # fails: summary, hints
        run_cli("status", "--db", db),
        run_cli("status", "--db", db, "--crawl", "nope"),
        run_cli("failed", "--db", db),
    ]
    env = {**cli_env(), "CRASHSAFE_DB": db}
    outputs.append(
        subprocess.run([*CLI, "status", "--help"], capture_output=True, text=True, env=env)
    )
    for out in outputs:
        assert SECRET not in out.stdout + out.stderr, out.args
        assert "Traceback" not in out.stderr
    masked = "postgres:***@" if where == "userinfo" else "password=***"
    assert masked in outputs[0].stderr  # the hints name the database, masked


def test_unreachable_or_wrong_databases_are_one_line_errors(pg_url: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]  # nothing listens there
    base = pg_url.split("?", 1)[0]
    cases = {
        base.replace(":5432/", f":{free}/") + "?connect_timeout=3": "check the host and port",
        base.rsplit("/", 1)[0] + "/no_such_db_crashsafe": "does not exist",
        pg_url + "_never_made": "holds no crashsafe data",
        base + "?schema=Bad-Name": "not a plain lower-case name",
        base + "?reconnect_seconds=soon": "reconnect_seconds",
    }
    for url, words in cases.items():
        out = run_cli("status", "--db", url)
        assert out.returncode == 1, (url, out.stderr)
        assert words in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_the_environment_names_the_database(pg_url: str) -> None:
    import subprocess

    env = {**cli_env(), "CRASHSAFE_DB": pg_url}
    out = subprocess.run([*CLI, "status"], capture_output=True, text=True, env=env)
    assert out.returncode == 1 and "holds no crashsafe data" in out.stderr, out.stderr


def test_a_server_that_takes_no_writes_is_named_as_such_to_a_crawl(
    shop: Callable[..., ShopThread], pg_url: str
) -> None:
    site = shop(listings=1, per_listing=1)
    assert run_cli(*crawl_args(site, pg_url)).returncode == 0  # the schema exists
    # as a standby replica, or a database set default_transaction_read_only
    read_only = pg_url + "&options=-c%20default_transaction_read_only%3Don"
    crawled = run_cli(*crawl_args(site, read_only))
    assert crawled.returncode == 1 and "Traceback" not in crawled.stderr
    assert "the server takes no writes" in crawled.stderr, crawled.stderr
    assert "this command only reads" not in crawled.stderr  # (it said so, #22 item 6)
    assert run_cli("status", "--db", read_only).returncode == 0  # reading is fine
