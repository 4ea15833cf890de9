"""`crashsafe demo`: the shop comes up where the database's URLs point (a killed demo
resumes on its own port, a free one for a new database), a --port other than the
database's is refused saying which, and --fresh deletes nothing when the shop cannot
start."""

from __future__ import annotations

import re
import socket
import sqlite3
from pathlib import Path

from tests.helpers import reaped, run_cli, start_cli, wait_for

SMALL = ("--listings", "2", "--per-listing", "3", "--no-progress")


def done_pages(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM frontier WHERE state = 'done'").fetchone()[0])


def test_a_demo_run_again_uses_the_port_its_database_was_crawled_from(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    first = run_cli("demo", "--db", str(db), *SMALL)
    assert first.returncode == 0, first.stderr
    assert "6 stored for 6 products, 0 wrong, 0 missing" in first.stdout
    found = re.search(r"demo shop at http://127\.0\.0\.1:(\d+)/", first.stderr)
    assert found, first.stderr
    port = int(found.group(1))
    assert done_pages(db) == 8

    with socket.socket() as free:  # a port that is surely not the database's
        free.bind(("127.0.0.1", 0))
        other = free.getsockname()[1]
    refused = run_cli("demo", "--db", str(db), "--port", str(other), *SMALL)
    assert refused.returncode == 1
    assert f"was crawled from the demo shop on port {port}" in refused.stderr
    assert done_pages(db) == 8  # untouched

    again = run_cli("demo", "--db", str(db), *SMALL)
    assert again.returncode == 0, again.stderr
    assert f"demo shop at http://127.0.0.1:{port}/list/0" in again.stderr
    assert "(resuming" in again.stderr
    assert "the shop counted 0 page requests" in again.stdout  # all done: nothing again


def test_fresh_deletes_nothing_when_the_shop_cannot_start(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    first = run_cli("demo", "--db", str(db), *SMALL)
    assert first.returncode == 0, first.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        failed = run_cli("demo", "--db", str(db), "--fresh", "--port", str(port), *SMALL)
    assert failed.returncode == 1
    assert f"cannot start the demo shop on 127.0.0.1:{port}" in failed.stderr
    assert "pass another --port" in failed.stderr
    assert done_pages(db) == 8  # --fresh waited for the shop: the database is still there


def test_a_second_demo_on_a_database_a_demo_crawls_is_refused(tmp_path: Path) -> None:
    """With --fresh (it would delete the file under the first) or without (before the
    first has stored a URL, the second would crawl the file from a shop of its own)."""
    db = tmp_path / "demo.db"
    slow = ("--latency-ms", "200", "--concurrency", "1")
    with reaped(start_cli("demo", "--db", str(db), *SMALL, *slow)) as running:
        wait_for(lambda: any((tmp_path / "demo.db-workers").glob("*.lock")))
        for extra in (("--fresh",), ()):
            refused = run_cli("demo", "--db", str(db), *extra, *SMALL)
            assert refused.returncode == 1, refused.stderr
            assert "another demo is running on" in refused.stderr
            assert "demo shop at" not in refused.stderr
        assert running.wait(timeout=120) == 0  # its crawl completes, in its own file
    assert done_pages(db) == 8
    again = run_cli("demo", "--db", str(db), "--fresh", *SMALL)  # the lock went with it
    assert again.returncode == 0, again.stderr
    assert done_pages(db) == 8


def test_a_demo_refuses_a_database_a_crawl_works_on(tmp_path: Path) -> None:
    from crashsafe.store.liveness import LockDir

    db = tmp_path / "demo.db"
    locks = LockDir(tmp_path / "demo.db-workers")
    locks.acquire("run1.host-1-abcd")  # (a worker of a crawl on the file, alive)
    try:
        refused = run_cli("demo", "--db", str(db), "--fresh", *SMALL)
        assert refused.returncode == 1, refused.stderr
        assert "is being crawled right now" in refused.stderr
    finally:
        locks.release("run1.host-1-abcd")
    assert run_cli("demo", "--db", str(db), *SMALL).returncode == 0


def test_a_demo_database_where_none_can_be_is_refused_saying_why(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    cases = {
        "afile/x.db": "afile is not a folder",
        "nx/sub/x.db": "nx/sub does not exist",  # (not created: crawl does not either)
        "a?b.db": "reads as a URL's query or fragment",
        "": "give a file",
        "newdir/": "give a file",  # (it made a file named newdir)
        "/dev/null": "not a file",  # (it made /dev/null-workers)
    }
    for db, said in cases.items():
        where = str(tmp_path / db) + ("/" if db.endswith("/") else "") if db else db
        refused = run_cli("demo", "--db", where, *SMALL)
        assert refused.returncode == 1, (db, refused.stderr)
        assert said in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing left behind


def test_a_demo_on_a_symbolic_link_works_on_the_file_it_names(tmp_path: Path) -> None:
    first = run_cli("demo", "--db", str(tmp_path / "x.db"), *SMALL)
    assert first.returncode == 0, first.stderr
    (tmp_path / "l.db").symlink_to(tmp_path / "x.db")
    again = run_cli("demo", "--db", str(tmp_path / "l.db"), "--fresh", *SMALL)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "l.db").is_symlink() and done_pages(tmp_path / "x.db") == 8
    assert not (tmp_path / "l.db-workers").exists()  # one file, one set of locks
