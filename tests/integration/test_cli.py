"""The command line, run as a user runs it: real subprocesses, real files."""

from __future__ import annotations

import csv
import io
import json
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crashsafe import open_store
from crashsafe.demo.shop import ShopThread
from tests.helpers import get_json, reaped, run_cli, start_cli, wait_for, wait_for_line


def crawl_args(site: ShopThread, db_url: str, *extra: str) -> list[str]:
    return [
        "crawl",
        "crashsafe.demo.spider:DemoShop",
        "--db",
        db_url,
        "--start-url",
        f"{site.url}/list/0",
        "--no-progress",
        *extra,
    ]


def test_crawl_status_export_agree_with_the_server(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=3, per_listing=10)
    done = run_cli(*crawl_args(site, db_url))
    assert done.returncode == 0, done.stderr
    assert "33 pages done, 0 failed, 30 records" in done.stderr

    status = run_cli("status", "--db", db_url, "--json")
    [row] = json.loads(status.stdout)
    server = get_json(f"{site.url}/stats")
    assert row["requests"] == server["requests"] == 33
    assert row["repeated"] == server["repeated"] == 0
    assert (row["done"], row["records"], row["pending"], row["leased"]) == (33, 30, 0, 0)
    assert row["requests_per_record"] == 1.1
    human = run_cli("status", "--db", db_url)
    assert "demo-shop" in human.stdout and "requests" in human.stdout

    catalogue = get_json(f"{site.url}/catalogue")
    out = tmp_path / "out.jsonl"
    written = run_cli("export", "--db", db_url, "-o", str(out))
    assert written.returncode == 0 and "wrote 30 record(s)" in written.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["_crashsafe_key"]: r["price"] for r in rows} == {
        k: v["price"] for k, v in catalogue.items()
    }
    as_csv = run_cli("export", "--db", db_url, "--format", "csv")
    parsed = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(parsed) == 30 and list(parsed[0]) == ["name", "price", "_crashsafe_key"]
    future = run_cli("export", "--db", db_url, "--since", "2999-01-01T00:00:00Z")
    assert future.stdout == ""

    again = run_cli(*crawl_args(site, db_url))  # the same command again: nothing to do
    assert again.returncode == 0
    assert get_json(f"{site.url}/stats")["requests"] == 33


def test_failed_and_retry(shop: Callable[..., ShopThread], db_url: str) -> None:
    site = shop(listings=2, per_listing=5, error_rate=1.0, error_attempts=9)
    args = crawl_args(site, db_url, "--max-attempts", "2", "--set", "backoff_base=0.01")
    first = run_cli(*args)
    # the start page never answered: nothing was crawled, and the exit status says so
    assert first.returncode == 1
    assert "1 URL(s) failed" in first.stderr and "no page was crawled" in first.stderr
    listed = run_cli("failed", "--db", db_url)
    assert "/list/0" in listed.stdout and "gave up after 2 attempts" in listed.stdout
    assert "1 failed URL(s)" in listed.stdout
    requeued = run_cli("retry", "--db", db_url)
    assert "re-queued 1 URL(s)" in requeued.stdout
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["pending"] == 1 and row["failed"] == 0


def test_errors_are_messages_not_tracebacks(tmp_path: Path, db_url: str) -> None:
    cases = [
        (["crawl", str(tmp_path / "nope.py"), "--db", db_url], "does not exist"),
        (["crawl", "crashsafe.demo.spider", "--db", "mysql://x"], "unknown database URL"),
        (["crawl", "crashsafe.demo.spider", "--db", db_url, "--set", "speed=9"], "unknown"),
        (["status", "--db", f"sqlite:///{tmp_path}/missing/dir/x.db"], "does not exist"),
        (["export", "--db", db_url, "--since", "yesterday"], "use an ISO time"),
        (["status", "--db", f"sqlite:///{tmp_path}/typo.db"], "typo.db does not exist"),
    ]
    not_ours = tmp_path / "other.db"
    import sqlite3

    with sqlite3.connect(not_ours) as db:
        db.execute("CREATE TABLE t (x)")
    cases.append((["status", "--db", f"sqlite:///{not_ours}"], "not a crashsafe one"))
    open_store(db_url).close()  # an empty crashsafe database
    cases.append((["status", "--db", db_url, "--crawl", "nope"], "no crawl named 'nope'"))
    # a folder given as the database; a file where the workers' lock folder goes (#22 6)
    folder = tmp_path / "folder.db"
    folder.mkdir()
    for command in ("crawl", "status"):
        args = [command, "--db", f"sqlite:///{folder}"]
        args += ["crashsafe.demo.spider", "--start-url", "http://127.0.0.1:9/"] * (
            command == "crawl"
        )
        cases.append((args, f"{folder} is a folder, not a database file"))
    with_workers = tmp_path / "locked.db"
    store = open_store(f"sqlite:///{with_workers}")
    store.register_worker("c")  # a worker row (dead once closed) and its lock folder
    store.close()
    shutil.rmtree(tmp_path / "locked.db-workers", ignore_errors=True)
    (tmp_path / "locked.db-workers").write_text("not a folder")
    for command in (
        ["status"],
        ["crawl", "crashsafe.demo.spider", "--start-url", "http://127.0.0.1:9/"],
    ):
        cases.append(
            (
                [*command, "--db", f"sqlite:///{with_workers}"],
                "locked.db-workers is a file where crashsafe needs a folder",
            )
        )
    for args, message in cases:
        result = run_cli(*args)
        assert result.returncode == 1, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_sigint_stops_gracefully_and_the_same_command_resumes(
    shop: Callable[..., ShopThread], db_url: str
) -> None:
    site = shop(listings=5, per_listing=20, latency_ms=40)
    args = crawl_args(site, db_url, "--concurrency", "4")
    with reaped(start_cli(*args)) as proc:
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 30)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Interrupted: run the same command again to resume." in err
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["leased"] == 0 and 0 < row["done"] < 105

    resumed = run_cli(*args)
    assert resumed.returncode == 0, resumed.stderr
    server = get_json(f"{site.url}/stats")
    assert server["distinct_pages"] == 105
    assert server["repeated"] == 0  # in-flight pages were finished, not dropped
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["records"] == 100 and row["requests"] == server["requests"]


def test_second_sigint_aborts_at_once(shop: Callable[..., ShopThread], db_url: str) -> None:
    site = shop(listings=1, per_listing=5, latency_ms=5000)
    with reaped(start_cli(*crawl_args(site, db_url))) as proc:
        wait_for(lambda: get_json(f"{site.url}/stats")["requests"] >= 1)
        proc.send_signal(signal.SIGINT)
        assert proc.stderr is not None
        wait_for_line(proc.stderr, "Stopping:")  # the first one is being handled
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 130
    assert time.monotonic() - started < 3
    assert "Aborted" in err


def test_the_readme_example_spider(shop: Callable[..., ShopThread], db_url: str) -> None:
    site = shop(listings=2, per_listing=5)
    example = Path(__file__).resolve().parents[2] / "examples" / "shop.py"
    args = ["crawl", str(example), "--db", db_url, "--start-url", f"{site.url}/list/0"]
    result = run_cli(*args, "--no-progress")
    assert result.returncode == 0, result.stderr
    assert "example-shop: 12 pages done, 0 failed, 10 records" in result.stderr


def crawl_with_parse(tmp_path: Path, site: ShopThread, db_url: str, body: str) -> Any:
    """Crawl the shop's listing with a spider whose product pages run ``body``."""
    spider = tmp_path / "spider.py"
    spider.write_text(
        "from crashsafe import Spider\n"
        "class Odd(Spider):\n"
        "    name = 'odd'\n"
        "    def parse(self, page):\n"
        "        if '/list/' in page.url:\n"
        "            yield from page.follow_all(css='a.product::attr(href)')\n"
        "        else:\n"
        f"            {body}\n"
    )
    return run_cli("crawl", f"{spider}:Odd", "--db", db_url,
                   "--start-url", f"{site.url}/list/0", "--no-progress")  # fmt: skip


def test_a_spider_that_stores_nothing_exits_1_with_its_errors_grouped(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=5)
    result = crawl_with_parse(tmp_path, site, db_url, "yield 42  # not a record")
    assert result.returncode == 1, result.stderr
    assert "5 failed: parse yielded int" in result.stderr  # one line for the five pages
    assert "no record was stored" in result.stderr
    grouped = run_cli("failed", "--group", "--db", db_url)
    assert grouped.stdout.splitlines()[0].split()[0] == "5"
    assert "yield Record(...), a dict (with item_key" in grouped.stdout


def test_a_dict_without_item_key_stops_the_crawl_in_one_line(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    site = shop(listings=1, per_listing=5)
    result = crawl_with_parse(tmp_path, site, db_url, "yield {'sku': page.url}  # no item_key")
    assert result.returncode == 1, result.stderr
    assert "set item_key = 'sku'" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_spider_that_fails_its_first_pages_the_same_way_stops_the_crawl(
    shop: Callable[..., ShopThread], db_url: str, tmp_path: Path
) -> None:
    spider = tmp_path / "broken.py"
    spider.write_text(
        "from crashsafe import Spider\n"
        "class Broken(Spider):\n"
        "    name = 'broken'\n"
        "    def parse(self, page):\n"
        "        if '/list/' in page.url:\n"
        "            yield from page.follow_all(css='a.product::attr(href)')\n"
        "        else:\n"
        "            raise KeyError('price')  # the same bug on every product page\n"
    )
    site = shop(listings=1, per_listing=20)
    result = run_cli("crawl", f"{spider}:Broken", "--db", db_url, "--concurrency", "2",
                     "--start-url", f"{site.url}/list/0", "--no-progress",
                     "--set", "fail_fast_after=3")  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "the spider failed 3 pages in a row with the same error" in result.stderr
    assert "KeyError: 'price'" in result.stderr
    assert "Traceback" not in result.stderr
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["failed"] <= 3 + 2 and row["pending"] >= 20 - 5  # the rest left for later


def test_a_spider_without_start_urls_says_so(db_url: str, tmp_path: Path) -> None:
    spider = tmp_path / "empty.py"
    spider.write_text(
        "from crashsafe import Spider\n"
        "class Empty(Spider):\n"
        "    name = 'empty'\n"
        "    def parse(self, page):\n"
        "        yield from ()\n"
    )
    result = run_cli("crawl", f"{spider}:Empty", "--db", db_url, "--no-progress")
    assert result.returncode == 0
    assert "has no start_urls" in result.stderr and "--start-url" in result.stderr


def test_a_full_disk_and_a_read_only_file_system_are_one_line_errors(
    shop: Callable[..., ShopThread], small_disk: Path
) -> None:
    site = shop(listings=5, per_listing=20)
    args = ["crawl", "crashsafe.demo.spider:DemoShop", "--db",
            f"sqlite:///{small_disk / 'shop.db'}", "--start-url", f"{site.url}/list/0",
            "--no-progress"]  # fmt: skip
    full = run_cli(*args)
    assert full.returncode == 1
    assert "disk full" in full.stderr and "Traceback" not in full.stderr
    # the same database on a file system mounted read-only (permission bits do not stop
    # root, a read-only mount does)
    subprocess.run(["mount", "-o", "remount,ro,size=1m", str(small_disk)], check=True)
    ro = run_cli(*args)
    assert ro.returncode == 1 and "Traceback" not in ro.stderr
    assert "read-only" in ro.stderr, ro.stderr


def test_reading_commands_work_on_a_read_only_file_system(
    shop: Callable[..., ShopThread], small_disk: Path
) -> None:
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_disk)], check=True)
    site = shop(listings=1, per_listing=5)
    db = f"sqlite:///{small_disk / 'shop.db'}"
    crawled = run_cli("crawl", "crashsafe.demo.spider:DemoShop", "--db", db,
                      "--start-url", f"{site.url}/list/0", "--no-progress")  # fmt: skip
    assert crawled.returncode == 0, crawled.stderr
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    status = run_cli("status", "--db", db, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)[0]["records"] == 5
    assert run_cli("failed", "--db", db).returncode == 0
    exported = run_cli("export", "--db", db)
    assert exported.returncode == 0 and len(exported.stdout.splitlines()) == 5


def test_reading_commands_do_not_migrate_an_older_database(tmp_path: Path) -> None:
    import sqlite3

    from crashsafe.store.queries import load_migrations

    old = tmp_path / "old.db"
    with sqlite3.connect(old) as db:  # a database as the previous version left it
        db.executescript(load_migrations("sqlite")[0][1])
        db.execute("PRAGMA user_version = 1")
    before = old.read_bytes()
    result = run_cli("status", "--db", f"sqlite:///{old}")
    assert result.returncode == 1 and "older crashsafe (schema version 1)" in result.stderr
    assert old.read_bytes() == before  # untouched
    # a writing command upgrades it
    assert run_cli("retry", "--db", f"sqlite:///{old}").returncode == 0
    assert run_cli("status", "--db", f"sqlite:///{old}").returncode == 0
