"""`batch classify --via batch-api` against the stand-in's Files and Batches endpoints,
through the official openai client (#26): answers like a synchronous run's, at batch
prices; a run SIGKILLed between any two steps of a chunk's life resumes without
submitting a chunk twice or paying an item twice; expired batches and failed lines are
asked again alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from crashsafe.batch.checkpoint import dead_letter_path, scan
from crashsafe.batch.testserver import LLMServerOptions, LLMServerThread
from tests.helpers import CLI, cli_env

LABELS = "positive,negative,neutral"
TEXTS = ["I love it", "it broke, I want a refund", "it is a lamp"]


def reviews(tmp_path: Path, n: int = 47) -> Path:
    path = tmp_path / "reviews.jsonl"
    with path.open("w") as out:
        for i in range(n):
            out.write(json.dumps({"id": f"r{i}", "text": f"{TEXTS[i % 3]} (#{i})"}) + "\n")
    return path


def classify_cmd(server: LLMServerThread, src: Path, cp: Path, *extra: str) -> list[str]:
    return [*CLI, "batch", "classify", str(src), "--labels", LABELS, "--checkpoint", str(cp),
            "--base-url", server.base_url, "--model", "test", "--batch-size", "5",
            "--no-progress", *extra]  # fmt: skip


def classify(server: LLMServerThread, src: Path, cp: Path, *extra: str,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    cmd = classify_cmd(server, src, cp, "--price-in", "1", "--price-out", "2", *extra)
    environ = {**cli_env(), "OPENAI_API_KEY": "", **(env or {})}
    return subprocess.run(cmd, env=environ, text=True, capture_output=True, timeout=120)


BATCH_API = ["--via", "batch-api", "--poll-seconds", "0.05", "--chunk-requests", "3"]


def answers(cp: Path) -> dict[str, Any]:
    """id -> result, asserting every id is written exactly once."""
    written = Counter(i for line in scan(cp).lines for i in line["ids"])
    twice = {i: n for i, n in written.items() if n > 1}
    assert not twice, f"answered more than once: {twice}"
    return {
        i: r for line in scan(cp).lines for i, r in zip(line["ids"], line["results"], strict=True)
    }


def test_batch_api_answers_as_a_sync_run_does_at_batch_prices(tmp_path: Path) -> None:
    src = reviews(tmp_path)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        sync = classify(server, src, tmp_path / "sync.jsonl")
        assert sync.returncode == 0, sync.stderr
        server.server.requests = 0
        via = classify(server, src, tmp_path / "api.jsonl", *BATCH_API)
        assert via.returncode == 0, via.stderr
        stats = server.server.snapshot()
        again = classify(server, src, tmp_path / "api.jsonl", *BATCH_API)
        assert again.returncode == 0, again.stderr
        after = server.server.snapshot()
    assert answers(tmp_path / "api.jsonl") == answers(tmp_path / "sync.jsonl")  # 47 labels
    assert stats["batches_created"] == 4 and stats["chunks_submitted_twice"] == 0  # 10 requests
    assert "at most" in via.stderr and "at batch prices" in via.stderr  # the estimate first
    lines = scan(tmp_path / "api.jsonl").lines
    assert all(line["via"] == "batch-api" and line["priced"].startswith("batch (50%")
               for line in lines)  # fmt: skip
    sync_lines = {tuple(line["ids"]): line for line in scan(tmp_path / "sync.jsonl").lines}
    for line in lines:  # the same tokens, half the price
        twin = sync_lines[tuple(line["ids"])]
        assert line["usage"]["prompt_tokens"] == twin["usage"]["prompt_tokens"]
        assert line["cost"] == pytest.approx(twin["cost"] / 2)
    report = subprocess.run([*CLI, "batch", "report", str(tmp_path / "api.jsonl"), "--format",
                             "json"], env=cli_env(), text=True, capture_output=True)  # fmt: skip
    summary = json.loads(report.stdout)["summary"]
    assert summary["items_batch_api"] == 47
    assert summary["cost_batch_api"] == pytest.approx(summary["cost"])
    # a rerun after completion asks the provider nothing
    assert "0 to do" in again.stderr
    assert (after["batches_created"], after["files_uploaded"], after["files_downloaded"]) == (
        stats["batches_created"],
        stats["files_uploaded"],
        stats["files_downloaded"],
    )


@pytest.mark.parametrize(
    "step",
    [
        "intent",  # written down, nothing uploaded
        "uploaded",  # uploaded, its id not written: found by its name
        "file",  # file id written, no batch
        "created",  # batch created, its id not written: found by its metadata
        "batch",  # batch id written
        "polled",  # while polling
        "answer:2",  # half-way through appending a chunk's answers
    ],
)
def test_a_run_killed_at_any_step_submits_nothing_twice(step: str, tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        killed = classify(server, src, cp, *BATCH_API, env={"CRASHSAFE_KILL_AT": step})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        done = classify(server, src, cp, *BATCH_API)
        assert done.returncode == 0, done.stderr
        stats = server.server.snapshot()
    assert len(answers(cp)) == 47  # every item, each once
    assert stats["chunks_submitted_twice"] == 0 and stats["items_paid_twice"] == 0
    assert stats["batches_created"] == 4 and stats["files_uploaded"] == 4  # 10 requests, 3 a chunk
    if step == "uploaded":
        assert "picked up" in done.stderr


def test_an_expired_batch_and_failed_lines_are_asked_again_alone(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    options = LLMServerOptions(batch_seconds=0.2, expire_every=2, line_error_every=4)
    with LLMServerThread(options) as server:
        done = classify(server, src, cp, *BATCH_API, "--max-attempts", "8")
        assert done.returncode == 0, done.stderr
        stats = server.server.snapshot()
    assert len(answers(cp)) == 47
    assert stats["items_paid_twice"] == 0 and stats["chunks_submitted_twice"] == 0
    assert stats["batches_created"] > 4  # the remainders went out in chunks of their own
    assert "expired" in done.stderr and "to ask again" in done.stderr


def test_lines_that_keep_failing_go_to_the_dead_letter(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, n=10), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1, line_error_every=1)) as server:
        done = classify(server, src, cp, *BATCH_API, "--max-attempts", "2")
    assert done.returncode == 4, done.stderr  # work left in the dead letter
    dead = [json.loads(line) for line in dead_letter_path(cp).read_text().splitlines()]
    assert sorted(i for line in dead for i in line["ids"]) == sorted(f"r{i}" for i in range(10))
    assert all("HTTP 500" in line["error"] and line["attempts"] == 2 for line in dead)


def test_a_spend_cap_is_checked_before_each_submission(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        capped = classify(server, src, cp, *BATCH_API, "--max-spend", "0.0015")
        stats = server.server.snapshot()
    assert capped.returncode == 3, capped.stderr  # the spend cap's exit status
    assert 0 < stats["batches_created"] < 4
    spent = sum(line["cost"] for line in scan(cp).lines)
    assert spent <= 0.0015


def test_interrupted_while_polling_leaves_the_batches_and_collects_them_later(
    tmp_path: Path,
) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=3.0)) as server:
        cmd = classify_cmd(server, src, cp, *BATCH_API)
        env = {**cli_env(), "OPENAI_API_KEY": ""}
        proc = subprocess.Popen(cmd, env=env, text=True, stderr=subprocess.PIPE)
        from tests.helpers import reaped, wait_for

        with reaped(proc):
            wait_for(lambda: server.server.snapshot()["batches_created"] == 4, timeout=60)
            os.kill(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "still at the provider" in err
        done = classify(server, src, cp, *BATCH_API)
        assert done.returncode == 0, done.stderr
        stats = server.server.snapshot()
    assert len(answers(cp)) == 47
    assert stats["batches_created"] == 4 and stats["chunks_submitted_twice"] == 0


def test_ctrl_c_cuts_a_call_to_the_provider_that_hangs(tmp_path: Path) -> None:
    """A look at a batch that never answers (a network that drops packets) held a Ctrl-C
    for the client's timeout and retries: minutes. It is cut after a short grace, and the
    next run collects the batches as they stand."""
    import dataclasses

    from tests.helpers import reaped, wait_for

    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    options = LLMServerOptions(batch_seconds=0.2, hang_polls=True)
    with LLMServerThread(options) as server:
        cmd = classify_cmd(server, src, cp, *BATCH_API)
        env = {**cli_env(), "OPENAI_API_KEY": ""}
        proc = subprocess.Popen(cmd, env=env, text=True, stderr=subprocess.PIPE)
        with reaped(proc):
            wait_for(lambda: server.server.batches.hanging >= 1, timeout=60)
            os.kill(proc.pid, signal.SIGINT)
            _, err = proc.communicate(timeout=60)  # (not the client's 600 s, retried)
        assert proc.returncode == 130, err
        assert "did not answer; cut" in err and "the next run collects it" in err
        server.server.options = dataclasses.replace(options, hang_polls=False)
        done = classify(server, src, cp, *BATCH_API)
        assert done.returncode == 0, done.stderr
        stats = server.server.snapshot()
    assert len(answers(cp)) == 47
    assert stats["chunks_submitted_twice"] == 0 and stats["items_paid_twice"] == 0


def test_via_auto_asks_a_small_job_synchronously_at_full_price(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        done = classify(server, src, cp, "--via", "auto", "--poll-seconds", "0.05")
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert stats["batches_created"] == 0 and stats["requests"] == 10  # 47 items < 100
    assert len(answers(cp)) == 47
    assert all("via" not in line for line in scan(cp).lines)  # full price: sync lines
    assert "fewer than --finish-sync-below 100" in done.stderr


def test_failed_lines_are_finished_synchronously_below_the_threshold(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1, line_error_every=4)) as server:
        done = classify(server, src, cp, *BATCH_API, "--finish-sync-below", "20")
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert stats["batches_created"] == 4  # the failed lines went out synchronously instead
    assert stats["items_paid_twice"] == 0 and stats["chunks_submitted_twice"] == 0
    lines = scan(cp).lines
    assert len(answers(cp)) == 47
    sync = [line for line in lines if "via" not in line]
    assert sync and sum(len(line["ids"]) for line in sync) < 20  # the failed lines' items
    for line in lines:  # --price-in 1 --price-out 2; batch lines at half of that
        usage, share = line["usage"], 0.5 if "via" in line else 1.0
        full = (usage["prompt_tokens"] * 1 + usage["completion_tokens"] * 2) / 1e6
        assert line["cost"] == pytest.approx(full * share)


def test_finish_sync_below_needs_the_batch_api(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, n=3), tmp_path / "out.jsonl"
    with LLMServerThread() as server:
        done = classify(server, src, cp, "--finish-sync-below", "5")
    assert done.returncode != 0 and "only with --via batch-api or --via auto" in done.stderr


# -- Anthropic's Message Batches, through the anthropic client ----------------------------

ANTHROPIC = [*BATCH_API, "--provider", "anthropic"]


def test_message_batches_answer_as_a_sync_run_does_at_batch_prices(tmp_path: Path) -> None:
    src = reviews(tmp_path)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        sync = classify(server, src, tmp_path / "sync.jsonl")
        via = classify(server, src, tmp_path / "api.jsonl", *ANTHROPIC)
        stats = server.server.snapshot()
        again = classify(server, src, tmp_path / "api.jsonl", *ANTHROPIC)
        after = server.server.snapshot()
    assert sync.returncode == 0 and via.returncode == 0, via.stderr
    assert answers(tmp_path / "api.jsonl") == answers(tmp_path / "sync.jsonl")
    assert stats["batches_created"] == 4 and stats["files_uploaded"] == 0  # no files
    assert "msgbatch_" in via.stderr
    sync_lines = {tuple(line["ids"]): line for line in scan(tmp_path / "sync.jsonl").lines}
    for line in scan(tmp_path / "api.jsonl").lines:  # the same tokens, half the price
        twin = sync_lines[tuple(line["ids"])]
        assert line["usage"]["prompt_tokens"] == twin["usage"]["prompt_tokens"]
        assert line["cost"] == pytest.approx(twin["cost"] / 2)
    assert again.returncode == 0 and "0 to do" in again.stderr
    assert after["batches_created"] == 4 and after["files_downloaded"] == 4


@pytest.mark.parametrize(
    "step",
    [
        "intent",  # written down, nothing sent
        "created",  # batch made, its id not written: found among the batches since
        "batch",  # batch id written
        "polled",  # while polling
        "answer:2",  # half-way through appending a chunk's answers
    ],
)
def test_message_batches_killed_at_any_step_submit_nothing_twice(step: str, tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        killed = classify(server, src, cp, *ANTHROPIC, env={"CRASHSAFE_KILL_AT": step})
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        done = classify(server, src, cp, *ANTHROPIC)
        assert done.returncode == 0, done.stderr
        stats = server.server.snapshot()
    assert len(answers(cp)) == 47  # every item, each once
    assert stats["items_submitted_twice"] == 0 and stats["items_paid_twice"] == 0
    assert stats["batches_created"] == 4
    if step == "created":
        assert "found at the provider" in done.stderr


def test_a_message_batch_still_running_is_waited_for_then_taken(tmp_path: Path) -> None:
    # Message Batches carry no metadata: a batch made by a run killed before it wrote the
    # id is told by its results' custom_ids, so the chunk waits for it to end. The
    # stand-in's batches run until the rerun says it waits; then they end.
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=600)) as server:
        killed = classify(server, src, cp, *ANTHROPIC, env={"CRASHSAFE_KILL_AT": "created"})
        assert killed.returncode == -signal.SIGKILL
        cmd = [*CLI, "batch", "classify", str(src), "--labels", LABELS, "--checkpoint", str(cp),
               "--base-url", server.base_url, "--model", "test", "--batch-size", "5",
               "--no-progress", *ANTHROPIC]  # fmt: skip
        proc = subprocess.Popen(cmd, env={**cli_env(), "OPENAI_API_KEY": ""}, text=True,
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)  # fmt: skip
        said = []
        try:
            assert proc.stderr is not None
            for line in proc.stderr:  # ends when the run does: bounded by its own end
                said.append(line)
                if "waiting for it to end to tell" in line:
                    server.server.options = replace(server.server.options, batch_seconds=0)
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stats = server.server.snapshot()
    text = "".join(said)
    assert code == 0, text
    assert "waiting for it to end to tell" in text and "c000001 found at the provider" in text
    assert stats["batches_created"] == 4 and stats["items_paid_twice"] == 0
    assert len(answers(cp)) == 47


def test_message_batches_expired_and_failed_requests_are_asked_again(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    options = LLMServerOptions(batch_seconds=0.2, expire_every=2, line_error_every=4)
    with LLMServerThread(options) as server:
        done = classify(server, src, cp, *ANTHROPIC, "--max-attempts", "8")
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert len(answers(cp)) == 47
    assert stats["items_paid_twice"] == 0 and stats["batches_created"] > 4
    assert "to ask again" in done.stderr


def test_another_jobs_message_batch_of_the_same_size_is_not_taken(tmp_path: Path) -> None:
    # job A is killed just after making its first batch; job B (another checkpoint) makes
    # batches of the same size meanwhile. A's rerun must take its own batch, not B's.
    src = reviews(tmp_path)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.5)) as server:
        killed = classify(server, src, a, *ANTHROPIC, env={"CRASHSAFE_KILL_AT": "created"})
        assert killed.returncode == -signal.SIGKILL
        other = classify(server, src, b, *ANTHROPIC)
        done = classify(server, src, a, *ANTHROPIC)
        stats = server.server.snapshot()
    assert other.returncode == 0 and done.returncode == 0, done.stderr
    assert len(answers(a)) == 47 and len(answers(b)) == 47
    assert stats["batches_created"] == 8  # four each: A's first one taken, not made again
    assert stats["items_billed"] == 94


def test_the_anthropic_provider_without_its_package_says_how_to_get_it(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, n=3), tmp_path / "out.jsonl"
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "anthropic.py").write_text("raise ImportError('not installed')\n")
    with LLMServerThread() as server:
        env = {"PYTHONPATH": str(blocker)}
        done = classify(server, src, cp, *ANTHROPIC, env=env)
    assert done.returncode != 0
    assert "pip install 'crashsafe[anthropic]'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_chunks_stay_under_the_size_limit_and_the_job_says_how_it_stands(
    provider: str, tmp_path: Path
) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        # a request of 5 reviews is about 600-700 bytes: 840 bytes hold one, never two
        done = classify(server, src, cp, "--via", "batch-api", "--poll-seconds", "0.05",
                        "--provider", provider, "--chunk-mb", "0.0008")  # fmt: skip
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert stats["batches_created"] == 10 and len(answers(cp)) == 47
    final = [line for line in done.stderr.splitlines() if line.startswith("batch-api: 10 chunks")]
    assert final and "47 items answered by this run" in final[-1], done.stderr
    assert "spent" in final[-1] and "at batch prices" in final[-1]


def test_a_checkpoint_written_by_d0670a4_goes_on_through_the_batch_api(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, n=10), tmp_path / "old.jsonl"
    # a line as d0670a4 wrote it: no hashes, no job line
    old = {"ids": ["r0", "r1", "r2"], "results": [{"label": "positive"}] * 3, "usage": {},
           "attempts": 1, "finished_at": "2026-12-01T00:00:00Z"}  # fmt: skip
    cp.write_text(json.dumps(old) + "\n")
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        done = classify(server, src, cp, *BATCH_API)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert "3 already done, 7 to do" in done.stderr
    assert len(answers(cp)) == 10 and stats["items_billed"] == 7


def test_a_chunks_file_with_its_newlines_stays_under_the_size_limit(tmp_path: Path) -> None:
    src = reviews(tmp_path)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.05)) as server:
        two = classify(server, src, tmp_path / "two.jsonl", *BATCH_API[:4],
                       "--chunk-requests", "2")  # fmt: skip
        assert two.returncode == 0, two.stderr
        first = min((f for f in server.server.batches.files.values() if f.purpose == "batch"),
                    key=lambda f: f.filename)  # fmt: skip
    assert first.data.count(b"\n") == 2
    limit = len(first.data) - 1  # the same two requests, one byte too many (a newline)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.05)) as server:
        done = classify(server, src, tmp_path / "one.jsonl", *BATCH_API[:4],
                        "--chunk-mb", str(limit / 10**6))  # fmt: skip
        files = [f.data for f in server.server.batches.files.values() if f.purpose == "batch"]
    assert done.returncode == 0, done.stderr
    assert files and max(map(len, files)) <= limit  # (the newlines were not counted)
    assert len(answers(tmp_path / "one.jsonl")) == 47
