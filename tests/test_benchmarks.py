"""The benchmark scripts still run (tiny sizes; no timing is asserted, only that each
contender crawled every page and the tables print)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def run(script: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_peers_prints_the_side_by_side_table() -> None:
    out = run(
        "peers.py", "--products", "40", "--repeat", "1", "--latency-ms", "0",
        "--also-concurrency", "--workers", "2", "--only", "crashsafe", "ceiling",
    )  # fmt: skip
    counted = out.split("requests the shop counted (last run): ")[1].splitlines()[0]
    contenders = [
        "crashsafe c=16", "crashsafe c=16 ahead 16", "ceiling c=16",
        "crashsafe c=16 ahead 16 2 workers",
    ]  # fmt: skip
    for name in contenders:
        assert f"\n{name} " in out  # a row of the table
        assert f"{name} 42" in counted  # 2 listings + 40 products, each fetched once


def test_where_time_goes_accounts_for_every_page() -> None:
    out = run("where_time_goes.py", "--products", "40", "--lease-ahead", "4")
    assert out.startswith("42 pages in ")
    assert "store round trips:" in out and "event loop thread CPU:" in out


def test_startup_prints_the_first_request_times() -> None:
    out = run("startup.py", "--repeat", "1")
    table = out.split("from process start to the first request")[1]
    assert "crashsafe " in table  # it made its first request (a failed run is left out)


def test_frontier_scaling_measures_claims_under_a_held_snapshot(pg_database: str) -> None:
    out = run("frontier_scaling.py", "--pg", pg_database, "--held-snapshot", "0.05")
    assert "without a held snapshot: " in out and "with a held snapshot: " in out
    rows = out.split("pages/s in each 30 s")[1]
    assert "no snapshot held  overall" in rows and "held snapshot  overall" in rows
    assert "held / not held, overall: " in rows


def test_recrawl_shows_an_unchanged_shop_costing_no_body() -> None:
    out = run("recrawl.py", "--products", "40", "--repeat", "1")
    names = ("first crawl", "recrawl, unchanged", "recrawl, next round")
    # each row: name, seconds, body bytes, 304s, parsed, time %, bytes %
    rows = {name: line[len(name):].split() for line in out.splitlines()
            for name in names if line.startswith(name)}  # fmt: skip
    assert rows["first crawl"][2:4] == ["0", "42"]  # no 304, every page parsed
    assert rows["recrawl, unchanged"][1:4] == ["0", "42", "0"]  # no body, all 304, none parsed
    assert int(rows["recrawl, next round"][3]) > 0  # what the round changed is parsed


def test_rendering_prints_its_table() -> None:
    from tests.chromium import required_chromium

    required_chromium()
    out = run("rendering.py", "--products", "20", "--concurrency", "2", "--repeat", "1",
              "--only", "crashsafe")  # fmt: skip
    assert "crashsafe render=True c=2" in out and "crashsafe auto c=2" in out
    assert out.count("20/20") == 4  # each stored every product, on both shops
