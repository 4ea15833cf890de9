"""`crashsafe batch` as a user runs it: subprocesses, real signals, real files."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crashsafe.batch.checkpoint import scan
from crashsafe.batch.testserver import LLMServerOptions, LLMServerThread
from tests.helpers import CLI, cli_env, reaped, run_cli, wait_for

ROOT = Path(__file__).resolve().parents[2]
TASK = f"{ROOT / 'examples' / 'word_count.py'}:count_words"
SAMPLE = ROOT / "src" / "crashsafe" / "batch" / "data" / "reviews.jsonl"


def start(*args: str, sleep: float = 0.0) -> subprocess.Popen[str]:
    env = cli_env() | {"EXAMPLE_SLEEP": str(sleep)}
    return subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def lines_in(path: Path) -> int:
    return len(scan(path).lines)


def test_run_resume_and_report(tmp_path: Path) -> None:
    cp = tmp_path / "counts.jsonl"
    args = ["batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", TASK]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert "0 already done, 200 to do in 20 batches" in first.stderr
    assert "200 items in 20 batches, 0 batches failed" in first.stderr  # words, not a dict
    again = run_cli(*args)
    assert "200 already done, 0 to do in 0 batches" in again.stderr
    report = json.loads(run_cli("batch", "report", str(cp), "--format", "json").stdout)
    assert report["summary"]["items"] == 200 and len(report["rows"]) == 200
    assert report["summary"]["cost"] is None  # no prices given: no cost, not 0
    csv_out = run_cli("batch", "report", str(cp), "--format", "csv").stdout.splitlines()
    assert csv_out[0] == "id,words" and len(csv_out) == 201
    lines = run_cli("batch", "report", str(cp), "--format", "jsonl").stdout.splitlines()
    rows = [json.loads(line) for line in lines]
    assert rows == report["rows"]  # one line per id: {"id", "result"}, as json's rows
    table = run_cli("batch", "report", str(cp)).stdout
    assert "items (one row per id)" in table and "200" in table


def test_shards_merge_in_the_report(tmp_path: Path) -> None:
    parts = []
    for k in (1, 2):
        cp = tmp_path / f"part{k}.jsonl"
        result = run_cli(
            "batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", TASK,
            "--shard", f"{k}/2",
        )  # fmt: skip
        assert result.returncode == 0 and f"shard {k}/2:" in result.stderr
        parts.append(str(cp))
    report = json.loads(run_cli("batch", "report", *parts, "--format", "json").stdout)
    assert report["summary"]["items"] == 200 and report["summary"]["duplicates_folded"] == 0


def test_sigint_finishes_in_flight_batches_then_resumes(tmp_path: Path) -> None:
    cp = tmp_path / "counts.jsonl"
    args = ["batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", TASK]
    with reaped(start(*args, "--concurrency", "2", sleep=0.3)) as proc:
        wait_for(lambda: cp.exists() and lines_in(cp) >= 2, timeout=30)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Interrupted: run the same command again to resume." in err
    written = lines_in(cp)
    assert 2 <= written < 20
    assert not cp.read_bytes().endswith(b"}")  # every line whole
    resumed = run_cli(*args)
    assert f"{written * 10} already done" in resumed.stderr
    assert lines_in(cp) == 20 and len(scan(cp).done_ids()) == 200


def test_a_second_run_on_the_same_checkpoint_is_refused(tmp_path: Path) -> None:
    cp = tmp_path / "counts.jsonl"
    args = ["batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", TASK]
    with reaped(start(*args, "--concurrency", "1", sleep=0.5)):
        wait_for(lambda: cp.exists(), timeout=30)
        second = run_cli(*args)
        assert second.returncode == 1
        assert "is in use by pid" in second.stderr and "Traceback" not in second.stderr


def test_failing_task_exits_non_zero_and_keeps_nothing_half_done(tmp_path: Path) -> None:
    task = tmp_path / "flaky.py"
    task.write_text(
        "def run(items):\n"
        "    if any('broke' in i.text for i in items):\n"
        "        raise RuntimeError('upstream said no')\n"
        "    return ['ok'] * len(items)\n"
    )
    cp = tmp_path / "r.jsonl"
    args = ["batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", f"{task}:run"]
    result = run_cli(*args, "--max-attempts", "1")
    assert result.returncode == 4  # done, with work left in the dead letter
    assert "failed and were not marked done" in result.stderr
    dead = [json.loads(x) for x in (tmp_path / "r.failed.jsonl").read_text().splitlines()]
    assert dead and all("upstream said no" in d["error"] for d in dead)
    assert not {i for d in dead for i in d["ids"]} & scan(cp).done_ids()


def test_bad_input_is_a_message(tmp_path: Path) -> None:
    cp = tmp_path / "r.jsonl"
    missing = run_cli("batch", "run", "nope.jsonl", "--checkpoint", str(cp), "--task", TASK)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    bad_task = run_cli("batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", "x")
    assert bad_task.returncode == 1 and "module:function" in bad_task.stderr
    no_url = run_cli("batch", "classify", str(SAMPLE), "--checkpoint", str(cp), "--labels", "a,b")
    assert no_url.returncode == 1 and "--base-url" in no_url.stderr


@pytest.mark.slow
def test_ten_sigkills_then_exactly_200_rows_and_bounded_repaid_items(tmp_path: Path) -> None:
    cp = tmp_path / "labels.jsonl"
    concurrency, batch_size = 4, 10
    rng = random.Random(7)
    with LLMServerThread(LLMServerOptions(latency_ms=150)) as server:
        args = [
            "batch", "classify", str(SAMPLE), "--checkpoint", str(cp),
            "--labels", "positive,negative,neutral", "--base-url", server.base_url,
            "--concurrency", str(concurrency), "--batch-size", str(batch_size),
        ]  # fmt: skip
        kills = 0
        for _ in range(10):
            before = server.server.requests
            with reaped(start(*args)) as proc:
                wait_for(lambda b=before: server.server.requests > b, timeout=30)
                time.sleep(rng.uniform(0.0, 0.3))
                if proc.poll() is not None:
                    break
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
        final = subprocess.run(
            [*CLI, *args], capture_output=True, text=True, env=cli_env(), timeout=120
        )
        stats = server.server.snapshot()
    assert final.returncode == 0, final.stderr
    assert kills >= 5
    report = json.loads(run_cli("batch", "report", str(cp), "--format", "json").stdout)
    assert report["summary"]["items"] == 200 and report["summary"]["duplicates_folded"] == 0
    assert stats["distinct_items_billed"] == 200
    assert stats["items_paid_twice"] <= concurrency * batch_size * kills
    print(f"{kills} kills: {stats['items_paid_twice']} items paid twice")


def test_batch_demo_runs_offline_and_shows_a_resume(tmp_path: Path) -> None:
    result = subprocess.run(
        [*CLI, "batch", "demo", "--dir", str(tmp_path / "demo")],
        capture_output=True, text=True, env=cli_env() | {"NO_COLOR": "1"}, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "100 already done, 100 to do in 10 batches" in result.stderr
    assert "billed 200 items for 200 reviews: 0 paid twice" in result.stdout
    assert os.path.exists(tmp_path / "demo" / "results.jsonl")
    assert sys.executable


def test_a_closed_pipe_does_not_end_the_job(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"review {n} great"}) + "\n" for n in range(40)))
    cp = tmp_path / "out.jsonl"
    with LLMServerThread() as server:
        args = ["batch", "classify", str(src), "--checkpoint", str(cp), "--batch-size", "5",
                "--labels", "positive,negative", "--base-url", server.base_url]  # fmt: skip
        popen = subprocess.Popen(
            [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=cli_env()
        )
        with reaped(popen) as proc:
            assert proc.stdout is not None
            proc.stdout.readline()  # like `| head -1`: read one line, then go away
            proc.stdout.close()
            assert proc.wait(120) == 0
    assert sum(len(x["ids"]) for x in scan(cp).lines) == 40


def test_ctrl_c_stops_within_the_grace_period_even_when_calls_take_longer(
    tmp_path: Path,
) -> None:
    task = tmp_path / "slow.py"
    marker = tmp_path / "started"
    task.write_text(
        "import time\n"
        "from pathlib import Path\n"
        "def slow(items):\n"
        f"    Path({str(marker)!r}).touch()\n"
        "    time.sleep(60)  # a call far longer than the grace period\n"
        "    return [{'ok': True} for _ in items]\n"
    )
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"item {n}"}) + "\n" for n in range(20)))
    cp = tmp_path / "out.jsonl"
    args = ["batch", "run", str(src), "--checkpoint", str(cp), "--task", f"{task}:slow",
            "--batch-size", "5", "--concurrency", "2", "--grace-seconds", "1"]  # fmt: skip
    popen = subprocess.Popen(
        [*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env()
    )
    with reaped(popen) as proc:
        wait_for(marker.exists, timeout=60)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=50)
        stopped_in = time.monotonic() - started
    assert proc.returncode == 130, err
    assert "did not finish in the grace period: not written" in err
    assert stopped_in < 30  # the grace period (1 s) and start-up, not the 60 s call
    assert scan(cp).lines == [] and scan(cp).corrupt == 0  # nothing half-written


def test_a_dead_letter_with_bytes_that_are_not_utf8_is_read(tmp_path: Path) -> None:
    cp = tmp_path / "counts.jsonl"
    assert run_cli("batch", "run", str(SAMPLE), "--checkpoint", str(cp),
                   "--task", TASK).returncode == 0  # fmt: skip
    dead = tmp_path / "counts.failed.jsonl"
    dead.write_bytes(b'{"ids": ["x"], "error": "bad \xff\xfe bytes", "usage": {}}\n\xff\n')
    report = run_cli("batch", "report", str(cp), "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["summary"]["failed_not_done"] == 1


def test_a_full_disk_is_one_line_and_the_resume_repairs_the_torn_line(small_disk: Path) -> None:
    cp = small_disk / "counts.jsonl"  # a full run writes ~10 KB: the disk fills half-way
    args = ["batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", TASK]
    full = run_cli(*args)
    assert full.returncode == 1, full.stderr
    assert f"disk full while appending to {cp}" in full.stderr
    assert "Traceback" not in full.stderr
    done_before = scan(cp).done_ids()
    assert 0 < len(done_before) < 200
    # more room, the same command: it resumes, and the line the full disk cut is cut off
    subprocess.run(["mount", "-o", "remount,size=1m", str(small_disk)], check=True)
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    found = scan(cp)
    assert found.corrupt == 0 and not found.torn_bytes
    ids = [i for line in found.lines for i in line["ids"]]
    assert len(ids) == len(set(ids)) == 200  # each item once


def test_a_read_only_checkpoint_or_lock_path_is_one_line_naming_the_file(
    small_disk: Path, tmp_path: Path
) -> None:
    cp = small_disk / "out.jsonl"
    locked_out = small_disk / "held.jsonl"  # the checkpoint writable, its lock file not
    locked_out.touch()
    writable = tmp_path / "held.jsonl"
    writable.touch()
    # permission bits do not stop root; a read-only mount does
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    subprocess.run(["mount", "--bind", str(writable), str(locked_out)], check=True)
    try:
        for checkpoint, named in [(cp, cp), (locked_out, small_disk / "held.jsonl.lock")]:
            result = run_cli("batch", "run", str(SAMPLE), "--checkpoint", str(checkpoint),
                             "--task", TASK)  # fmt: skip
            assert result.returncode == 1, result.stderr
            assert "Traceback" not in result.stderr
            [line] = result.stderr.splitlines()
            assert f"cannot write {named}: Read-only file system" in line, line
    finally:
        subprocess.run(["umount", str(locked_out)], check=True)
    assert writable.read_bytes() == b""  # nothing written where the lock could not be taken


def test_wrong_typed_lines_are_corrupt_for_report_and_run_which_name_them(
    tmp_path: Path,
) -> None:
    cp = tmp_path / "counts.jsonl"
    args = ["batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", TASK]
    assert run_cli(*args).returncode == 0
    lines = cp.read_text().splitlines()  # 20 batches of 10
    lines[1] = json.dumps({**json.loads(lines[1]), "usage": [1]})
    lines[4] = json.dumps({**json.loads(lines[4]), "ids": [["x"]] * 10})
    cp.write_text("\n".join(lines) + "\n")
    dead = tmp_path / "counts.failed.jsonl"  # a dead letter with wrong types too
    dead.write_text(
        json.dumps({"ids": [["z"]], "error": "e", "usage": [1]}) + "\n"
        + json.dumps({"ids": ["gone"], "error": "e", "usage": {"prompt_tokens": 1e400}}) + "\n"
        + '{"ids": ["gone2"], "error": "e", "usage": {"prompt_tokens": Infinity}}\n'
    )  # fmt: skip
    report = run_cli("batch", "report", str(cp), "--format", "json")
    assert report.returncode == 0, report.stderr
    summary = json.loads(report.stdout)["summary"]
    assert (summary["items"], summary["corrupt_lines"], summary["failed_not_done"]) == (180, 2, 2)
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert f"warning: 2 corrupt line(s) in {cp} skipped (lines 2, 5)" in again.stderr
    assert "180 already done, 20 to do in 2 batches" in again.stderr
    assert len(scan(cp).done_ids()) == 200


def test_a_last_line_without_its_newline_is_kept_and_a_torn_one_cut_with_a_warning(
    tmp_path: Path,
) -> None:
    cp = tmp_path / "counts.jsonl"
    args = ["batch", "run", str(SAMPLE), "--checkpoint", str(cp), "--task", TASK]
    assert run_cli(*args).returncode == 0
    whole = cp.read_bytes()
    cp.write_bytes(whole[:-1])  # the last line whole, its newline never written
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr
    assert "200 already done, 0 to do in 0 batches" in again.stderr  # nothing asked again
    assert "warning" not in again.stderr and cp.read_bytes() == whole
    cp.write_bytes(whole[:-20])  # a line cut short: its batch is done again, and said so
    torn = run_cli(*args)
    assert torn.returncode == 0, torn.stderr
    assert f"warning: cut an unfinished last line ({len(whole.splitlines()[-1]) - 19} bytes" in (
        torn.stderr
    )
    assert "190 already done, 10 to do in 1 batch\n" in torn.stderr
    assert scan(cp).corrupt == 0 and len(scan(cp).done_ids()) == 200
