"""`crashsafe killtest` end to end (small shop), and its scoring."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from crashsafe.killtest import KillTestOptions, KillTestResult
from crashsafe.killtest.batch_api_mode import (
    STEPS,
    SUBMISSION,
    BatchApiKillOptions,
    kill_schedule,
)
from crashsafe.killtest.runner import (
    Calibration,
    Outcome,
    request_schedule,
    score,
)
from tests.chromium import required_chromium
from tests.helpers import run_cli

SMALL = ["--listings", "5", "--per-listing", "10"]


def figures(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text())


@pytest.mark.slow
def test_short_killtest_holds_and_naive_duplicates(tmp_path: Path) -> None:
    out, chart = tmp_path / "k.json", tmp_path / "k.svg"
    result = run_cli(
        "killtest", "--runs", "1", "--kills", "3", *SMALL,
        "--json", str(out), "--chart", str(chart),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "crashsafe: holds" in result.stdout
    data = figures(out)
    [run] = data["runs"]
    safe, naive = run["crashsafe"], run["naive"]
    assert (safe["rows"], safe["distinct"], safe["wrong"], safe["missing"]) == (50, 50, 0, 0)
    # Invariants per landed kill, never how many landed (on a busy machine the crawl may
    # finish before a late kill): at most `concurrency` repeated requests for each one.
    assert safe["repeated"] <= safe["bound"] == 4 * safe["kills_landed"]
    assert safe["requests"] >= data["pages"] == 55
    if naive["kills_landed"]:
        assert naive["rows"] > 50 and naive["duplicates"] > 0  # the anti-pattern, as expected
    assert data["holds"] is True
    assert chart.read_text().startswith("<svg") and "crashsafe" in chart.read_text()


@pytest.mark.slow
def test_killtest_with_every_chaos_option(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    result = run_cli(
        "killtest", "--runs", "1", "--kills", "3", *SMALL, "--workers", "2",
        "--error-rate", "0.1", "--tracking", "--dup-links", "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    safe = figures(out)["runs"][0]["crashsafe"]
    assert (safe["rows"], safe["distinct"], safe["wrong"], safe["missing"]) == (50, 50, 0, 0)
    assert safe["repeated"] <= safe["bound"]
    assert safe["final_exit"] == [0, 0]


@pytest.mark.slow
def test_killtest_with_leases_ahead_keeps_the_wider_bound(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    result = run_cli(
        "killtest", "--runs", "1", "--kills", "3", *SMALL, "--lease-ahead", "4",
        "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "+ 4 leased ahead" in result.stdout
    safe = figures(out)["runs"][0]["crashsafe"]
    assert (safe["rows"], safe["distinct"], safe["wrong"], safe["missing"]) == (50, 50, 0, 0)
    assert safe["repeated"] <= safe["bound"] == (4 + 4) * safe["kills_landed"]


@pytest.mark.slow
def test_killtest_graceful_signal(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    result = run_cli(
        "killtest", "--runs", "1", "--kills", "3", *SMALL, "--signal", "INT", "--json", str(out)
    )
    assert result.returncode == 0, result.stdout + result.stderr
    safe = figures(out)["runs"][0]["crashsafe"]
    assert (safe["rows"], safe["wrong"], safe["missing"]) == (50, 0, 0)
    assert safe["repeated"] == 0  # a graceful stop finishes its pages


def test_violations_catch_every_broken_promise() -> None:
    result = KillTestResult(KillTestOptions(concurrency=2), Calibration(0.5, 2.0))
    good = Outcome("crashsafe", rows=500, distinct=500, repeated=4, kills_landed=2)
    good.final_exit = [0]
    assert result.violations(good) == []
    bad = Outcome("crashsafe", rows=501, distinct=499, wrong=1, missing=1, repeated=5)
    bad.kills_landed, bad.final_exit = 2, [1]
    assert result.violations(bad) == [
        "2 duplicate rows",
        "1 products missing",
        "1 wrong values",
        "5 repeated requests > bound 4",
        "final run exited [1]",
    ]


def test_score_counts_wrong_duplicate_and_missing_rows() -> None:
    catalogue = {"A": {"name": "a", "price": "1"}, "B": {"name": "b", "price": "2"}}
    rows = [("A", "a", "1"), ("A", "a", "1"), ("A", "a", "9"), ("Z", "z", "0")]
    assert score(rows, catalogue) == (1, 2, 1)  # distinct known, wrong rows, missing


def test_kill_schedule_is_seeded_and_inside_the_window() -> None:
    assert KillTestOptions().sig == signal.SIGKILL
    # kill tests count requests (calls), not seconds: 525 pages, 2 workers, 10 kills
    r = request_schedule(kills=10, workers=2, window=(0.2, 1.0), pages=525, seed=7)
    assert r == request_schedule(kills=10, workers=2, window=(0.2, 1.0), pages=525, seed=7)
    assert all(5 <= n <= 27 for w in r for n in w)  # u * 525 / 20, rounded


def test_a_killtest_where_no_kill_landed_says_not_tested(tmp_path: Path) -> None:
    # kills scheduled far past the end of the crawl: none can land
    result = run_cli("killtest", "--runs", "1", "--kills", "2", "--kill-window", "50:60", *SMALL)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "crashsafe: NOT TESTED" in result.stdout and "holds" not in result.stdout


@pytest.mark.slow
def test_batch_mode_killtest(tmp_path: Path) -> None:
    out = tmp_path / "kb.json"
    result = run_cli(
        "killtest", "--mode", "batch", "--runs", "1", "--kills", "3", "--latency-ms", "150",
        "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "crashsafe: holds" in result.stdout
    [run] = figures(out)["runs"]
    safe, naive = run["crashsafe"], run["naive"]
    assert (safe["rows"], safe["distinct"], safe["wrong"], safe["missing"]) == (200, 200, 0, 0)
    assert safe["paid_twice"] <= 4 * 10 * safe["kills_landed"]  # per landed kill
    if naive["kills_landed"]:
        assert naive["rows"] > 200  # restarts from the first review and writes it all again


def test_a_batch_killtest_where_no_kill_landed_says_not_tested(tmp_path: Path) -> None:
    # kills after 1 500 calls or more of a job that makes 20: every job finishes first
    out = tmp_path / "kb.json"
    result = run_cli(
        "killtest", "--mode", "batch", "--runs", "1", "--kills", "2", "--kill-window", "50:60",
        "--latency-ms", "20", "--json", str(out),
    )  # fmt: skip
    assert "kills landed" in result.stdout and "0/2" in result.stdout
    assert "crashsafe: NOT TESTED" in result.stdout and "holds" not in result.stdout
    assert result.returncode == 1, result.stdout + result.stderr
    data = figures(out)
    assert (data["tested"], data["holds"]) == (False, False)


@pytest.mark.slow
def test_batch_api_killtest_kills_at_every_step_and_never_submits_twice(tmp_path: Path) -> None:
    out = tmp_path / "ka.json"
    result = run_cli("killtest", "--mode", "batch-api", "--runs", "1", "--kills", "8",
                     "--json", str(out))  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "crashsafe: holds" in result.stdout
    [run] = figures(out)["runs"]
    safe, naive = run["crashsafe"], run["naive"]
    assert (safe["rows"], safe["distinct"], safe["wrong"], safe["missing"]) == (200, 200, 0, 0)
    assert {k.partition(":")[0] for k in safe["kills"]} == set(STEPS)  # each step, landed
    assert safe["batches_created"] == 10  # one per chunk, whatever the kills
    assert (safe["items_submitted_twice"], safe["items_paid_twice"]) == (0, 0)
    assert safe["items_billed"] == 200
    assert naive["kills"] and naive["items_submitted_twice"] > 0  # the peer submits again
    assert naive["items_paid_twice"] > 0


def test_batch_api_kill_schedule_has_every_step_submissions_first() -> None:
    for run in range(5):
        points = kill_schedule(BatchApiKillOptions(kills=8), run)
        steps = [p.partition(":")[0] for p in points]
        assert set(steps) == set(STEPS)
        assert set(steps[: len(SUBMISSION)]) == set(SUBMISSION)
    assert kill_schedule(BatchApiKillOptions(kills=8, seed=1), 0) != points


def test_batch_mode_refuses_crawl_options() -> None:
    result = run_cli("killtest", "--mode", "batch", "--workers", "2")
    assert result.returncode == 1 and "crawl kill test only" in result.stderr
    result = run_cli("killtest", "--mode", "batch-api", "--signal", "INT")
    assert result.returncode == 1 and "not with --mode batch-api" in result.stderr


@pytest.mark.slow
def test_killtest_with_effects_checks_files_warc_and_webhooks(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    result = run_cli(
        "killtest", "--runs", "1", "--kills", "3", "--listings", "4", "--effects",
        "--json", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "side effects hold" in result.stdout
    data = figures(out)
    safe = data["runs"][0]["crashsafe"]
    effects = safe["effects"]
    assert (effects["files"], effects["files_expected"], effects["temporaries"]) == (7, 7, 0)
    assert effects["records_without_file"] == 0 and effects["warc_unreadable"] == []
    assert effects["warc_responses"] >= 80 + 4 + 80  # every page and picture once at least
    assert effects["processed"] == effects["events"] == 80 and effects["processed_twice"] == 0
    assert effects["records"] == 80 and effects["processed_unknown"] == 0
    assert effects["warc_missing"] == 0  # every listing, product and picture archived
    assert safe["repeated"] <= safe["bound"] == 8 * safe["kills_landed"]


@pytest.mark.slow
def test_render_killtest_holds_and_leaves_no_chromium(tmp_path: Path) -> None:
    """killtest --render: JavaScript product pages rendered in Chromium, the crawl SIGKILLed;
    exactly one correct record per product, and after every kill no browser process of the
    killed crawl is left (the run counts any it finds, and ends them)."""
    required_chromium()
    out = tmp_path / "k.json"
    result = run_cli(
        "killtest", "--render", "--runs", "1", "--kills", "3", "--listings", "3",
        "--per-listing", "8", "--json", str(out), timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    data = figures(out)
    [run] = data["runs"]
    safe = run["crashsafe"]
    assert (safe["rows"], safe["distinct"], safe["wrong"], safe["missing"]) == (24, 24, 0, 0)
    assert safe["browsers_left"] == 0 and safe["kills_landed"] >= 1
    assert safe["repeated"] <= safe["bound"] == 4 * safe["kills_landed"]
    assert run["naive"]["wrong"] == run["naive"]["rows"]  # HTML only: no prices at all
    assert "no browser process outlived its crawl" in result.stdout


def test_a_browser_left_behind_breaks_the_guarantee() -> None:
    result = KillTestResult(KillTestOptions(render=True), Calibration(0.5, 2.0))
    out = Outcome("crashsafe", rows=500, distinct=500, kills_landed=2, browsers_left=1)
    out.final_exit = [0]
    assert result.violations(out) == ["Chromium left running after 1 kill(s)"]
