"""`crashsafe crawl --workers N`: several crawl processes, same guarantee, on both backends
(SQLite: one store server in the command's process; PostgreSQL: a connection each)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from crashsafe.demo.shop import ShopThread
from tests import pg
from tests.helpers import exported, get_json, run_cli, start_cli, wait_for
from tests.integration.test_cli import crawl_args

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/task").exists(), reason="--workers needs POSIX; these tests read /proc"
)
CONCURRENCY = 4


def workers_of(pid: int) -> list[int]:
    """PIDs of the crawl workers a `crawl --workers` process started."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(c) for c in children if b"--parent-fd" in Path(f"/proc/{c}/cmdline").read_bytes()]


def alive(pid: int) -> bool:
    with contextlib.suppress(FileNotFoundError):
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    return False


def check_catalogue(site: ShopThread, db_url: str) -> dict:  # type: ignore[type-arg]
    records = exported(db_url)
    catalogue = get_json(f"{site.url}/catalogue")
    assert len(records) == len(catalogue)
    assert {r["key"]: r["data"] for r in records} == {
        k: {"name": v["name"], "price": v["price"]} for k, v in catalogue.items()
    }
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    return row  # type: ignore[no-any-return]


def owners(db_url: str) -> int:
    """Workers that leased URLs (read from the lease history)."""
    query = "SELECT count(DISTINCT owner) FROM lease_grants"
    if db_url.startswith("sqlite:"):
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db:
            return int(db.execute(query).fetchone()[0])
    with pg.connect(db_url) as conn:
        return int(conn.execute(query).fetchone()[0])


def start_workers(
    shop: Callable[..., ShopThread], db_url: str
) -> tuple[ShopThread, list[str], subprocess.Popen[str], list[int]]:
    site = shop(listings=25, per_listing=20, latency_ms=25)
    args = crawl_args(site, db_url, "--workers", "2", "--concurrency", str(CONCURRENCY))
    proc = start_cli(*args)
    wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 30)
    wait_for(lambda: len(workers_of(proc.pid)) == 2)
    return site, args, proc, workers_of(proc.pid)


def test_two_workers_share_one_crawl_and_store_every_record_once(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site = shop(listings=25, per_listing=20, latency_ms=5)
    result = run_cli(*crawl_args(site, any_db_url, "--workers", "2", "--concurrency", "4"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("525 pages done") == 1  # one summary, from the parent
    row = check_catalogue(site, any_db_url)
    assert row["done"] == 525 and row["repeated"] == 0
    assert get_json(f"{site.url}/stats")["requests"] == 525
    assert owners(any_db_url) == 2  # both workers leased


def test_killing_the_command_ends_its_workers_and_a_rerun_completes(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site, args, proc, workers = start_workers(shop, any_db_url)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Their pipe to it (and on SQLite their store socket) closed: they stop by themselves.
    wait_for(lambda: not any(alive(w) for w in workers), timeout=20)
    assert proc.stderr is not None
    said = proc.stderr.read()  # (the workers wrote to the command's stderr)
    assert "Ctrl-C" not in said  # nobody pressed it
    if any_db_url.startswith("postgresql"):  # (on SQLite their store closed too: either stops)
        assert said.count("Stopping: the command that started this worker is gone;") == 2
    [row] = json.loads(run_cli("status", "--db", any_db_url, "--json").stdout)
    assert row["done"] < 525  # they stopped, rather than crawl on to the end
    final = run_cli(*args)
    assert final.returncode == 0, final.stderr
    check_catalogue(site, any_db_url)
    # At most what the two workers held (leased, fetched or committing) was repeated.
    assert get_json(f"{site.url}/stats")["repeated"] <= 2 * CONCURRENCY


def test_ctrl_c_stops_every_worker_gracefully(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site, args, proc, _ = start_workers(shop, any_db_url)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert err.count("run the same command again to resume") == 1
    [row] = json.loads(run_cli("status", "--db", any_db_url, "--json").stdout)
    assert row["leased"] == 0 and 0 < row["done"] < 525  # all given back, none lost
    final = run_cli(*args)
    assert final.returncode == 0, final.stderr
    check_catalogue(site, any_db_url)
    assert get_json(f"{site.url}/stats")["repeated"] == 0  # a graceful stop repeats nothing


def test_a_second_ctrl_c_aborts_every_worker_and_says_interrupted(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site, args, proc, _ = start_workers(shop, any_db_url)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "worker" not in err  # aborted on request: no worker is reported as failed
    final = run_cli(*args)
    assert final.returncode == 0, final.stderr
    check_catalogue(site, any_db_url)


def test_a_killed_worker_is_taken_over_by_the_others(
    shop: Callable[..., ShopThread], any_db_url: str
) -> None:
    site, _, proc, workers = start_workers(shop, any_db_url)
    os.kill(workers[0], signal.SIGKILL)  # as if the OOM killer chose it
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err  # the crawl still completed...
    assert "was killed by signal 9" in err  # ...and says what happened
    row = check_catalogue(site, any_db_url)
    assert row["leased"] == 0
    assert get_json(f"{site.url}/stats")["repeated"] <= CONCURRENCY


def test_workers_get_the_commands_settings(shop: Callable[..., ShopThread], db_url: str) -> None:
    site = shop(listings=3, per_listing=2)
    args = crawl_args(site, db_url, "--workers", "2", "--set", "max_depth=0", "--max-attempts=1")
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["done"] == 1  # max_depth=0 reached both workers: only the start page


def test_a_worker_paused_half_way_through_a_call_does_not_hold_up_the_others(
    tmp_path: Path,
) -> None:
    import pickle
    import struct
    import threading

    from crashsafe.store import open_store
    from crashsafe.store.process import serve

    url = f"sqlite:///{tmp_path / 'c.db'}"
    open_store(url).close()
    (a_ours, a), (b_ours, b) = (socket.socketpair() for _ in range(2))
    server = threading.Thread(target=serve, args=([a_ours, b_ours], url), daemon=True)
    server.start()
    header = struct.Struct("!I")

    def answer(sock: socket.socket) -> object:
        sock.settimeout(10)
        size = header.unpack(sock.recv(4, socket.MSG_WAITALL))[0]
        return pickle.loads(sock.recv(size, socket.MSG_WAITALL))

    assert answer(a) == (True, None) and answer(b) == (True, None)  # both served
    call = pickle.dumps(("crawls", (), {}))
    a.sendall(header.pack(len(call)) + call[:5])  # A stops half-way (SIGSTOP, GC pause)
    b.sendall(header.pack(len(call)) + call)
    assert answer(b) == (True, [])  # B is answered while A's call is incomplete
    a.sendall(call[5:])  # A goes on
    assert answer(a) == (True, [])
    a.close()
    b.close()  # the crawlers go: the server closes its ends and returns
    server.join(10)
    assert not server.is_alive()
