"""A spider written the Scrapy way (examples/members.py: a POST login whose cookie is
needed by every later page, a default header, a JSON search API by POST with one body
per page, ``meta`` and ``cb_kwargs`` carried along, dict and dataclass items keyed by
``item_key``, a gzipped sitemap) against the members-only shop, killed and restarted:
exactly one correct record per item."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crashsafe.demo.members import MembersOptions, MembersThread
from tests.helpers import CLI, cli_env, exported, get_json, reaped, run_cli, wait_for

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "members.py")
CONCURRENCY = 4
# A kill repeats at most the pages in flight; the login page is two requests (the POST
# and the GET its redirect leads to), and robots.txt may be fetched again too.
REPEATS_PER_KILL = CONCURRENCY + 2


@pytest.fixture
def members() -> Iterator[MembersThread]:
    with MembersThread(MembersOptions(latency_ms=15)) as site:
        yield site


def crawl_cmd(site: MembersThread, db_url: str, *extra: str) -> list[str]:
    return [*CLI, "crawl", EXAMPLE, "--db", db_url, "--concurrency", str(CONCURRENCY),
            "--no-progress", *extra]  # fmt: skip


def start(site: MembersThread, db_url: str) -> subprocess.Popen[str]:
    env = {**cli_env(), "MEMBERS_SITE": site.url}
    return subprocess.Popen(
        crawl_cmd(site, db_url), env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def finish(site: MembersThread, db_url: str) -> subprocess.CompletedProcess[str]:
    env = {**cli_env(), "MEMBERS_SITE": site.url}
    return subprocess.run(
        crawl_cmd(site, db_url), env=env, text=True, capture_output=True, timeout=120
    )


def server_log(site: MembersThread) -> list[str]:
    return [key for _, key in get_json(f"{site.url}/log")]


def stored(db_url: str) -> list[dict[str, Any]]:
    return exported(db_url)


def expected(site: MembersThread) -> dict[str, Any]:
    truth = get_json(f"{site.url}/truth")
    return {**truth["products"], **{k: {"sku": k, **v} for k, v in truth["guides"].items()}}


def test_a_restart_is_still_logged_in(members: MembersThread, db_url: str) -> None:
    """Killed once the login page committed (its links are being fetched), the restarted
    crawl never logs in again: the session cookie came back from the store."""
    with reaped(start(members, db_url)) as proc:
        wait_for(lambda: any("/category/" in k for k in server_log(members)), timeout=60)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    final = finish(members, db_url)
    assert final.returncode == 0, final.stderr
    log = server_log(members)
    assert sum(k.startswith("POST /login ") for k in log) == 1
    assert sum(k.startswith("GET /login ") for k in log) == 1  # never sent back to it
    records = stored(db_url)
    assert {r["key"]: r["data"] for r in records} == expected(members)


@pytest.mark.slow
def test_ten_sigkills_then_exactly_one_correct_record_per_item(
    members: MembersThread, db_url: str
) -> None:
    rng = random.Random(20261202)
    kills = 0
    for _ in range(10):
        before = get_json(f"{members.url}/stats")["requests"]
        wanted = before + rng.randint(1, 12)  # killed after the n-th request of this run
        with reaped(start(members, db_url)) as proc:
            try:
                wait_for(
                    lambda w=wanted: (
                        get_json(f"{members.url}/stats")["requests"] >= w or proc.poll() is not None
                    ),
                    timeout=60,
                )
            finally:
                proc.send_signal(signal.SIGKILL)
                code = proc.wait()
        if code == -signal.SIGKILL:
            kills += 1
        else:  # it finished first: the remaining kills have nothing to land on
            assert code == 0, proc.stderr.read() if proc.stderr else code
            break
    final = finish(members, db_url)
    assert final.returncode == 0, final.stderr

    records = stored(db_url)
    truth = expected(members)
    assert len(records) == len(truth) == 130
    assert {r["key"]: r["data"] for r in records} == truth  # categories came through meta
    assert all(r["version"] == 1 for r in records)
    [row] = json.loads(run_cli("status", "--db", db_url, "--json").stdout)
    assert row["failed"] == 0 and row["pending"] == 0 and row["leased"] == 0
    server = get_json(f"{members.url}/stats")
    assert server["repeated"] <= REPEATS_PER_KILL * kills, (server, kills)
    print(f"{kills} kills landed, {server['repeated']} repeated requests", file=sys.stderr)
    assert os.path.exists(db_url.removeprefix("sqlite:///"))


@pytest.mark.slow
def test_two_workers_share_the_login(any_db_url: str) -> None:
    """One worker logs in; the pages its login page found are fetched by both, logged
    in: the other worker loads the stored cookie before it fetches them."""
    with MembersThread(MembersOptions(latency_ms=150)) as site:
        env = {**cli_env(), "MEMBERS_SITE": site.url}
        if any_db_url.startswith("postgresql"):  # the login form's password is sealed:
            from crashsafe.sealed import new_key  # on PostgreSQL, with the workers' key

            env["CRASHSAFE_SECRET_KEY"] = new_key()
        done = subprocess.run(
            [*crawl_cmd(site, any_db_url), "--workers", "2"],
            env=env, text=True, capture_output=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "0 failed" in done.stderr, done.stderr
        records = stored(any_db_url)
        assert {r["key"]: r["data"] for r in records} == expected(site)
        log = server_log(site)
        assert sum(k.startswith("POST /login ") for k in log) == 1
