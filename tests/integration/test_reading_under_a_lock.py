"""Reading commands never wait for a writer's lock (#11 item 11)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crashsafe.demo.shop import ShopThread
from tests.helpers import CLI, cli_env, run_cli

HOLD_SECONDS = 60  # the writer's hold: far longer than a reading command may take
ANSWER_WITHIN = 20  # seconds; a command that waits for the lock takes HOLD_SECONDS

# Takes SQLite's write lock and keeps it until its stdin closes (or HOLD_SECONDS pass).
HOLDER = f"""
import select, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("BEGIN IMMEDIATE")
db.execute("UPDATE frontier SET depth = depth")
print("locked", flush=True)
select.select([sys.stdin], [], [], {HOLD_SECONDS})
db.execute("ROLLBACK")
"""


@pytest.fixture
def locked_db(shop: Callable[..., ShopThread], tmp_path: Path) -> Iterator[str]:
    """A crawled database whose write lock another process holds for the whole test."""
    site = shop(listings=1, per_listing=3)
    path = tmp_path / "shop.db"
    crawled = run_cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", f"sqlite:///{path}",
                      "--start-url", f"{site.url}/list/0", "--no-progress")  # fmt: skip
    assert crawled.returncode == 0, crawled.stderr
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"  # blocks until the lock is held
        yield f"sqlite:///{path}"
    finally:
        holder.kill()  # by its PID: the process this fixture started
        holder.communicate(timeout=30)


@pytest.mark.parametrize("command", [["status", "--json"], ["failed"], ["export"]])
def test_a_reading_command_answers_while_a_writer_holds_the_lock(
    locked_db: str, command: list[str]
) -> None:
    started = time.monotonic()
    try:
        result = subprocess.run(
            [*CLI, *command, "--db", locked_db],
            capture_output=True,
            text=True,
            timeout=ANSWER_WITHIN,
            env=cli_env(),
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command[0]} waited more than {ANSWER_WITHIN} s for the writer's lock")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < ANSWER_WITHIN
    if command[0] == "status":
        [row] = json.loads(result.stdout)
        assert row["records"] == 3
    if command[0] == "export":
        assert len(result.stdout.splitlines()) == 3
