"""`batch classify --via batch-api` under what an adversarial review found (#26): two
jobs on one account, texts changed or removed while their chunk runs, a damaged ledger,
a job changed while its chunks run, garbage from the provider, batches gone at the
provider. Each ends with every item answered once and nothing paid for another job."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from crashsafe.batch.batchapi.ledger import Ledger, ledger_path
from crashsafe.batch.checkpoint import dead_letter_path, scan
from crashsafe.batch.testserver import LLMServerOptions, LLMServerThread
from crashsafe.batch.testserver_batches import BatchesStandIn
from tests.batch.test_batch_api import BATCH_API, LABELS, answers, classify, reviews
from tests.helpers import CLI, cli_env

KILL_WHILE_POLLING = {"CRASHSAFE_KILL_AT": "polled"}


def run_killed_while_polling(server: LLMServerThread, src: Path, cp: Path) -> None:
    killed = classify(server, src, cp, *BATCH_API, env=KILL_WHILE_POLLING)
    assert killed.returncode == -signal.SIGKILL, killed.stderr


def test_two_jobs_on_one_account_never_use_each_others_files(tmp_path: Path) -> None:
    src = reviews(tmp_path)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        first = classify(server, src, tmp_path / "a.jsonl", *BATCH_API)
        second = classify(server, src, tmp_path / "b.jsonl", *BATCH_API)
        batches = list(server.server.batches.batches.values())
        stats = server.server.snapshot()
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    assert len(answers(tmp_path / "b.jsonl")) == 47
    assert stats["files_uploaded"] == 8 and len(batches) == 8
    assert len({b.input_file_id for b in batches}) == 8  # each batch its own job's file
    assert stats["items_billed"] == 94  # each job paid once for its 47 items
    assert not dead_letter_path(tmp_path / "b.jsonl").exists()


def test_a_text_changed_since_answered_gets_a_new_answer_once(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        assert classify(server, src, cp, *BATCH_API).returncode == 0
        assert answers(cp)["r0"] == {"label": "positive"}
        rows = src.read_text().splitlines()
        rows[0] = json.dumps({"id": "r0", "text": "it broke, I want a refund"})
        src.write_text("\n".join(rows) + "\n")
        changed = classify(server, src, cp, *BATCH_API)
        made = server.server.snapshot()["batches_created"]
        again = classify(server, src, cp, *BATCH_API)
        after = server.server.snapshot()["batches_created"]
    assert changed.returncode == 0, changed.stderr
    assert "1 item changed since answered" in changed.stderr
    final = {}
    for line in scan(cp).lines:  # the newest answer of each item counts
        final.update(zip(line["ids"], line["results"], strict=True))
    assert final["r0"] == {"label": "negative"}
    assert again.returncode == 0 and after == made == 5  # asked once, not on every rerun


def test_a_text_changed_while_its_chunk_runs_is_asked_again(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        run_killed_while_polling(server, src, cp)
        rows = src.read_text().splitlines()
        rows[0] = json.dumps({"id": "r0", "text": "it broke, I want a refund"})
        src.write_text("\n".join(rows) + "\n")
        done = classify(server, src, cp, *BATCH_API)
    assert done.returncode == 0, done.stderr
    assert "1 item changed since asked" in done.stderr
    assert answers(cp)["r0"] == {"label": "negative"}  # never the stale one
    assert len(answers(cp)) == 47


def test_an_item_removed_while_its_chunk_runs_leaves_its_neighbours_answered(
    tmp_path: Path,
) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        run_killed_while_polling(server, src, cp)
        src.write_text("\n".join(src.read_text().splitlines()[1:]) + "\n")  # r0 gone
        done = classify(server, src, cp, *BATCH_API)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    got = answers(cp)
    assert "r0" not in got and len(got) == 46  # r1-r4, asked with r0, written
    assert stats["items_paid_twice"] == 0


def _damage(path: Path, number: int) -> None:
    """Overwrite line ``number`` (0: the first) of ``path`` with bytes no JSON reader takes."""
    lines = path.read_bytes().split(b"\n")
    lines[number] = b"#" * len(lines[number])
    path.write_bytes(b"\n".join(lines))


def test_a_damaged_intent_line_is_said_and_no_chunk_name_is_reused(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        run_killed_while_polling(server, src, cp)
        ledger = ledger_path(cp)
        intents = [
            n for n, line in enumerate(ledger.read_text().splitlines()) if '"intent"' in line
        ]
        _damage(ledger, intents[0])
        done = classify(server, src, cp, *BATCH_API)
        again = classify(server, src, cp, *BATCH_API)
    assert done.returncode == 0 and again.returncode == 0, done.stderr
    assert "damaged line" in done.stderr and "c000001 lost what they asked" in done.stderr
    assert len(answers(cp)) == 47 and not dead_letter_path(cp).exists()
    names = [json.loads(line)["chunk"] for line in ledger.read_text().splitlines()
             if '"intent"' in line]  # fmt: skip
    assert len(names) == len(set(names)) and "c000001" not in names  # c000001's is damaged


def test_a_damaged_job_line_is_recovered_from_the_intents(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        run_killed_while_polling(server, src, cp)
        _damage(ledger_path(cp), 0)
        done = classify(server, src, cp, *BATCH_API)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert len(answers(cp)) == 47 and stats["items_paid_twice"] == 0


def test_a_ledger_line_of_the_wrong_shape_is_skipped_with_a_warning(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        run_killed_while_polling(server, src, cp)
        with ledger_path(cp).open("a") as out:
            out.write('{"chunk": "c000009", "intent": {}}\n')
            out.write('{"chunk": "c000010", "intent": {"groups": [["r1"]], "hashes": []}}\n')
        done = classify(server, src, cp, *BATCH_API)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "2 damaged lines" in done.stderr
    assert len(answers(cp)) == 47


def test_two_checkpoints_sharing_a_ledger_never_run_at_once(tmp_path: Path) -> None:
    src = reviews(tmp_path, n=5)
    held = Ledger(ledger_path(tmp_path / "m"))  # "m" and "m.jsonl" map to one ledger
    held.open()
    try:
        with LLMServerThread() as server:
            refused = classify(server, src, tmp_path / "m.jsonl", *BATCH_API)
            stats = server.server.snapshot()
    finally:
        held.close()
    assert refused.returncode != 0 and "in use by another run" in refused.stderr
    assert stats["files_uploaded"] == 0


def test_chunks_asked_by_another_job_are_not_collected_without_consent(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.2)) as server:
        run_killed_while_polling(server, src, cp)
        other = classify(server, src, cp, *BATCH_API, "--model", "other")
        accepted = classify(server, src, cp, *BATCH_API, "--model", "other", "--accept-changed")
        stats = server.server.snapshot()
    assert other.returncode != 0 and "still at the provider" in other.stderr
    assert "model test -> other" in other.stderr or "model" in other.stderr
    assert accepted.returncode == 0, accepted.stderr
    assert len(answers(cp)) == 47 and stats["items_paid_twice"] == 0


def _garble(stand_in: BatchesStandIn, how: str) -> None:
    """Make the first line of the stand-in's first two output files ``how``'s garbage."""
    made = stand_in._file_of
    garbled = []

    def file_of(filename: str, lines: list[dict[str, Any]]) -> str:
        if filename.endswith("_output.jsonl") and lines and len(garbled) < 2:
            garbled.append(filename)
            bad = "oops" if how == "response-a-string" else {"status_code": 200, "body": []}
            lines = [{**lines[0], "response": bad}, *lines[1:]]
        return made(filename, lines)

    stand_in._file_of = file_of  # type: ignore[method-assign]


@pytest.mark.parametrize("how", ["response-a-string", "body-a-list"])
def test_garbage_in_an_output_file_fails_that_request_only(how: str, tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        _garble(server.server.batches, how)
        done = classify(server, src, cp, *BATCH_API)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "to ask again" in done.stderr
    assert len(answers(cp)) == 47
    assert stats["batches_created"] > 4  # the garbled requests went out again, alone


def test_an_answer_in_both_files_is_taken_not_asked_again(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        stand_in = server.server.batches
        original_end = stand_in._end

        def end(batch: Any, status: str, *, answer_up_to: int | None) -> None:
            original_end(batch, status, answer_up_to=answer_up_to)
            first = json.loads(stand_in.files[batch.output_file_id].data.splitlines()[0])
            failed = {**first, "response": None, "error": {"code": "x", "message": "dup"}}
            batch.error_file_id = stand_in._file_of(f"{batch.id}_error.jsonl", [failed])

        stand_in._end = end  # type: ignore[method-assign]
        done = classify(server, src, cp, *BATCH_API)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert "to ask again" not in done.stderr
    assert stats["batches_created"] == 4 and len(answers(cp)) == 47


def test_a_request_answered_twice_differently_is_said(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        stand_in = server.server.batches
        original_end = stand_in._end

        def end(batch: Any, status: str, *, answer_up_to: int | None) -> None:
            original_end(batch, status, answer_up_to=answer_up_to)
            out = stand_in.files[batch.output_file_id]
            first = json.loads(out.data.splitlines()[0])
            body = first["response"]["body"]
            body["choices"][0]["message"]["content"] += " "  # another answer, same request
            out.data += (json.dumps(first) + "\n").encode()

        stand_in._end = end  # type: ignore[method-assign]
        done = classify(server, src, cp, *BATCH_API)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("answered 1 request(s) twice, differently") == 4
    assert len(answers(cp)) == 47


def test_a_batch_gone_at_the_provider_is_asked_again(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=30)) as server:
        run_killed_while_polling(server, src, cp)
        port = server.port
    # the provider forgot everything (a stand-in restarted; a key of another project)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1), port=port) as server:
        done = classify(server, src, cp, *BATCH_API)
    assert done.returncode == 0, done.stderr
    assert "not found at the provider" in done.stderr
    assert "check --base-url" not in done.stderr
    assert len(answers(cp)) == 47


def test_a_failed_batch_says_why(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, n=5), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        stand_in = server.server.batches
        original_end = stand_in._end
        calls = threading.Semaphore(1)

        def end(batch: Any, status: str, *, answer_up_to: int | None) -> None:
            if calls.acquire(blocking=False):  # the first batch fails validation
                original_end(batch, "failed", answer_up_to=0)
                batch.errors = {"object": "list", "data": [
                    {"code": "token_limit_exceeded", "message": "Enqueued token limit reached"}
                ]}  # fmt: skip
                return
            original_end(batch, status, answer_up_to=answer_up_to)

        stand_in._end = end  # type: ignore[method-assign]
        done = classify(server, src, cp, *BATCH_API)
    assert done.returncode == 0, done.stderr
    assert "Enqueued token limit reached" in done.stderr
    assert len(answers(cp)) == 5


def test_a_dead_lettered_requests_cost_counts_once_against_the_total_cap(
    tmp_path: Path,
) -> None:
    src, cp = reviews(tmp_path, n=5), tmp_path / "out.jsonl"
    prices = ["--price-in", "1000", "--price-out", "2000"]  # per 1M tokens: visible costs
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1, invalid_every=1)) as server:
        failed = classify(server, src, cp, *BATCH_API, "--max-attempts", "2", *prices)
        tokens = server.server.snapshot()["tokens"]  # both attempts, each billed once
        capped = classify(server, src, cp, *BATCH_API, *prices, "--max-spend-total", "0.00001")
    assert failed.returncode == 4, failed.stderr  # in the dead letter after 2 attempts
    billed = (tokens["prompt_tokens"] * 1000 + tokens["completion_tokens"] * 2000) / 1e6 * 0.5
    assert f"({billed:.4f} spent by earlier runs" in capped.stderr, capped.stderr


# -- a second review -----------------------------------------------------------------------


def run_until_waiting(server: LLMServerThread, cmd: list[str]) -> tuple[int, str]:
    """Run ``cmd`` while the stand-in's batches hold; once it says it waits for a batch
    to end, let them end. Its exit status and what it said."""
    proc = subprocess.Popen(cmd, env={**cli_env(), "OPENAI_API_KEY": ""}, text=True,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)  # fmt: skip
    said = []
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # until the run ends
            said.append(line)
            if "waiting for it to end to tell" in line:
                server.server.options = replace(server.server.options, batch_seconds=0)
        return proc.wait(timeout=120), "".join(said)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def command(server: LLMServerThread, src: Path, cp: Path, *extra: str) -> list[str]:
    return [*CLI, "batch", "classify", str(src), "--labels", LABELS, "--checkpoint", str(cp),
            "--base-url", server.base_url, "--model", "test", "--batch-size", "5",
            "--no-progress", *BATCH_API, *extra]  # fmt: skip


def test_a_message_batch_made_before_items_were_removed_is_still_found(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    anthropic = ["--provider", "anthropic"]
    with LLMServerThread(LLMServerOptions(batch_seconds=600)) as server:
        killed = classify(server, src, cp, *BATCH_API, *anthropic,
                          env={"CRASHSAFE_KILL_AT": "created"})  # fmt: skip
        assert killed.returncode == -signal.SIGKILL
        # r0-r4, the first request of the chunk at the provider, leave the input
        src.write_text("\n".join(src.read_text().splitlines()[5:]) + "\n")
        code, said = run_until_waiting(server, command(server, src, cp, *anthropic))
        stats = server.server.snapshot()
    assert code == 0, said
    assert said.count("waiting for it to end to tell") == 1  # c000001's only: not new ones
    assert "c000001 found at the provider" in said
    assert stats["batches_created"] == 4 and stats["items_paid_twice"] == 0
    assert len(answers(cp)) == 42


def test_a_message_batch_made_after_items_were_removed_is_still_found(tmp_path: Path) -> None:
    # Killed once its chunk's intent is written; a request's items leave the input; killed
    # again once its batch is made, without that request: the batch was looked for with
    # the intent's three requests, not found, and made again (paid twice: a review).
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    anthropic = ["--provider", "anthropic"]
    with LLMServerThread(LLMServerOptions(batch_seconds=600)) as server:
        for step in ("intent", "created"):
            killed = classify(server, src, cp, *BATCH_API, *anthropic,
                              env={"CRASHSAFE_KILL_AT": step})  # fmt: skip
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            if step == "intent":  # r5-r9, c000001's second request, leave the input
                rows = src.read_text().splitlines()
                src.write_text("\n".join(rows[:5] + rows[10:]) + "\n")
        code, said = run_until_waiting(server, command(server, src, cp, *anthropic))
        stats = server.server.snapshot()
    assert code == 0, said
    assert "c000001 found at the provider" in said
    assert stats["batches_created"] == 4 and stats["items_paid_twice"] == 0, said
    assert len(answers(cp)) == 42


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_batch_made_by_a_call_whose_answer_was_lost_is_not_made_again(
    provider: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashsafe.batch.testserver_messages import MessageBatchesStandIn

    owner = BatchesStandIn if provider == "openai" else MessageBatchesStandIn
    made = owner.create
    dropped = []

    async def create_then_drop(self: Any, request: Any) -> Any:
        answer = await made(self, request)
        if not dropped:  # the first batch is made, its answer never arrives
            dropped.append(1)
            request.transport.abort()
        return answer

    monkeypatch.setattr(owner, "create", create_then_drop)
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        done = classify(server, src, cp, *BATCH_API, "--provider", provider)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert "looking for it before making it again" in done.stderr
    assert stats["batches_created"] == 4 and stats["items_submitted_twice"] == 0
    assert len(answers(cp)) == 47


def test_the_total_cap_holds_across_a_crash_loop(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    cap = ["--max-spend-total", "0.002"]  # about two chunks' worst cost
    with LLMServerThread(LLMServerOptions(batch_seconds=600)) as server:
        runs = []
        for _ in range(3):  # each killed while its batches run
            killed = classify(server, src, cp, *BATCH_API, *cap, env=KILL_WHILE_POLLING)
            assert killed.returncode == -signal.SIGKILL, killed.stderr
            runs.append(server.server.snapshot()["batches_created"])
        server.server.options = replace(server.server.options, batch_seconds=0)
        final = classify(server, src, cp, *BATCH_API, *cap)
    assert 0 < runs[0] < 4 and runs == [runs[0]] * 3  # the chunks running hold the cap
    assert final.returncode == 3, final.stderr  # then the cap stops the job
    assert sum(line["cost"] for line in scan(cp).lines) <= 0.002


def test_the_synchronous_remainder_is_reserved_at_full_price(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, n=100), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1, latency_ms=200)) as server:
        first = classify(server, src, cp, *BATCH_API, "--max-spend", "0.0025")
        assert first.returncode == 3, first.stderr  # some answered at batch prices
        before = len(scan(cp).lines)
        rest = classify(server, src, cp, "--via", "auto", "--finish-sync-below", "1000",
                        "--poll-seconds", "0.05", "--max-spend", "0.002",
                        "--concurrency", "16")  # fmt: skip
    spent = sum(line["cost"] for line in scan(cp).lines[before:])
    assert rest.returncode in (0, 3), rest.stderr
    assert all("via" not in line for line in scan(cp).lines[before:])
    assert 0 < spent <= 0.002, (spent, rest.stderr[-600:])


def test_a_damaged_job_line_still_guards_against_another_job(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        run_killed_while_polling(server, src, cp)
        _damage(ledger_path(cp), 0)
        other = classify(server, src, cp, *BATCH_API, "--model", "other")
    assert other.returncode != 0 and "still at the provider" in other.stderr


def test_a_ledger_copied_beside_another_checkpoint_is_refused(tmp_path: Path) -> None:
    src = reviews(tmp_path)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        run_killed_while_polling(server, src, a)
        ledger_path(b).write_bytes(ledger_path(a).read_bytes())
        refused = classify(server, src, b, *BATCH_API)
        stats = server.server.snapshot()
    assert refused.returncode != 0 and "is the ledger of the checkpoint a.jsonl" in refused.stderr
    assert stats["batches_created"] == 4  # a's, nothing more


def test_a_run_through_a_symbolic_link_to_the_checkpoint_finds_its_ledger(
    tmp_path: Path,
) -> None:
    # The ledger was looked up beside the link's name: a run through the link found none,
    # and made every chunk still at the provider again (paid twice: found by a review).
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "latest.jsonl"
    link.symlink_to(cp)
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        run_killed_while_polling(server, src, cp)
        made = server.server.snapshot()["batches_created"]
        done = classify(server, src, link, *BATCH_API)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert made == 4 and stats["batches_created"] == 4  # collected, none made again
    assert stats["items_paid_twice"] == 0
    assert len(answers(cp)) == 47 and not ledger_path(cp).is_symlink()
    assert not (tmp_path / "links" / "latest.batches.jsonl").exists()
    # and a synchronous run through the link sees a ledger with chunks still running
    link2 = tmp_path / "links" / "second.jsonl"
    link2.symlink_to(tmp_path / "second.jsonl")
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        run_killed_while_polling(server, src, tmp_path / "second.jsonl")
        sync = classify(server, src, link2)
    assert sync.returncode != 0 and "still at the provider" in sync.stderr


def test_a_checkpoint_in_a_linked_folder_or_linked_beside_another_jobs_is_run(
    tmp_path: Path,
) -> None:
    # (a first version refused both: a review) A folder reached through a link, and a
    # link "m" to data.jsonl beside the job "m.jsonl", whose ledger is m.batches.jsonl.
    src = reviews(tmp_path)
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    in_alias = tmp_path / "alias" / "out.jsonl"
    (tmp_path / "m").symlink_to(tmp_path / "data.jsonl")
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        run_killed_while_polling(server, src, in_alias)
        again = classify(server, src, in_alias, *BATCH_API)
        stats = server.server.snapshot()
        assert classify(server, src, tmp_path / "m.jsonl", *BATCH_API).returncode == 0
        linked = classify(server, src, tmp_path / "m", *BATCH_API)  # (a job of its own)
        after = server.server.snapshot()
    assert again.returncode == 0 and linked.returncode == 0, again.stderr + linked.stderr
    assert len(answers(in_alias)) == len(answers(tmp_path / "data.jsonl")) == 47
    assert stats["items_paid_twice"] == 0 and after["chunks_submitted_twice"] == 0


def test_a_checkpoint_with_a_second_hard_link_is_refused(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        run_killed_while_polling(server, src, cp)
        (tmp_path / "other.jsonl").hardlink_to(cp)
        refused = classify(server, src, tmp_path / "other.jsonl", *BATCH_API)
        sync = classify(server, src, tmp_path / "other.jsonl")  # (it would pay them all)
        stats = server.server.snapshot()
    for said in (refused, sync):
        assert said.returncode != 0
        assert "has 2 names (hard links)" in said.stderr and "Traceback" not in said.stderr
    assert stats["batches_created"] == 4 and stats["items_paid_twice"] == 0


def test_a_batch_completed_before_its_files_are_listed_is_waited_for(tmp_path: Path) -> None:
    # OpenAI has been seen to say "completed", its requests counted, before it lists the
    # output file: taken as ended then, every request was asked (and paid for) again.
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    # (its error file listed already: some lines failed; the output file comes later)
    options = LLMServerOptions(batch_seconds=0.1, files_late_polls=3, line_error_every=4)
    with LLMServerThread(options) as server:
        done = classify(server, src, cp, *BATCH_API, "--max-attempts", "3")
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert "its answer files are not listed yet: waiting for them" in done.stderr
    assert len(answers(cp)) == 47 and stats["items_paid_twice"] == 0


def test_answer_files_never_listed_are_given_up_on_after_the_wait() -> None:
    from crashsafe.batch.batchapi.openai_provider import OpenAIBatches

    provider = OpenAIBatches(None, base_url="http://127.0.0.1:9", secrets=[])
    said: list[str] = []
    provider.say = said.append
    assert provider._files_late("b1") == "finalizing"  # waits (600 s by default)
    assert provider._files_late("b1") == "finalizing" and len(said) == 1  # said once
    provider.files_late = 0.0  # the wait is over: ended, its requests asked again
    assert provider._files_late("b1") == "completed"
    assert "its requests are asked again" in said[-1]


def test_a_ledger_of_only_its_job_line_given_as_the_checkpoint_is_refused(
    tmp_path: Path,
) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.05)) as server:
        assert classify(server, src, cp).returncode == 0  # all answered synchronously
        assert classify(server, src, cp, *BATCH_API).returncode == 0  # a ledger: job line
        before = ledger_path(cp).read_bytes()
        refused = classify(server, src, ledger_path(cp))
    assert refused.returncode != 0 and "is the ledger of a Batch API job" in refused.stderr
    assert ledger_path(cp).read_bytes() == before


def test_a_ledger_given_as_the_checkpoint_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.3)) as server:
        run_killed_while_polling(server, src, cp)
        ledger = ledger_path(cp)
        before = ledger.read_bytes()
        refused = classify(server, src, ledger)
        report = subprocess.run([*CLI, "batch", "report", str(ledger)], env=cli_env(),
                                text=True, capture_output=True, timeout=60)  # fmt: skip
        stats = server.server.snapshot()
    for said in (refused, report):
        assert said.returncode != 0 and "Traceback" not in said.stderr
        assert f"{ledger} is the ledger of a Batch API job, not a checkpoint" in said.stderr
    assert ledger.read_bytes() == before and stats["batches_created"] == 4


def test_a_batch_the_provider_refuses_ends_its_chunk_and_the_job_goes_on(tmp_path: Path) -> None:
    # A 400 on making a batch (a file too large, say) left its chunk "still at the
    # provider" for good: every synchronous run refused ("would be paid twice") though the
    # provider had made nothing, and only moving the ledger aside got out (a review).
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    options = LLMServerOptions(batch_seconds=0.05, refuse_batches=True)
    with LLMServerThread(options) as server:
        refused = classify(server, src, cp, *BATCH_API)
        assert refused.returncode != 0 and "this batch is refused" in refused.stderr
        assert "Traceback" not in refused.stderr
        sync = classify(server, src, cp)  # nothing is at the provider: it may ask them
        server.server.options = replace(options, refuse_batches=False)
        stats = server.server.snapshot()
    assert sync.returncode == 0, sync.stderr
    assert len(answers(cp)) == 47 and stats["batches_created"] == 0
    chunks = Ledger(ledger_path(cp))
    chunks.open()
    chunks.close()
    assert [c.ended for c in chunks.chunks.values()] == ["refused"]


def lose_the_first_create(monkeypatch: pytest.MonkeyPatch, hidden_looks: int) -> list[str]:
    """The stand-in makes the first batch but its answer is lost; its list shows nothing
    for the first ``hidden_looks`` looks; any later create is refused (a 400). The calls
    made, in order ("create", "list")."""
    from aiohttp import web

    made, listed = BatchesStandIn.create, BatchesStandIn.list_batches
    calls: list[str] = []

    async def create(self: Any, request: Any) -> Any:
        calls.append("create")
        if calls.count("create") > 1:
            return web.json_response({"error": {"message": "refused"}}, status=400)
        answer = await made(self, request)
        request.transport.abort()  # the first batch is made, its answer lost
        return answer

    async def list_batches(self: Any, request: Any) -> Any:
        calls.append("list")
        if calls.count("list") <= hidden_looks:
            return web.json_response({"object": "list", "data": [], "has_more": False})
        return await listed(self, request)

    monkeypatch.setattr(BatchesStandIn, "create", create)
    monkeypatch.setattr(BatchesStandIn, "list_batches", list_batches)
    return calls


def test_a_batch_the_list_shows_late_after_a_lost_answer_is_not_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A create whose answer was lost made the batch; the list shows it only from the
    # third look on. One look, a second later, then a second batch: paid twice (a review).
    calls = lose_the_first_create(monkeypatch, hidden_looks=2)
    src, cp = reviews(tmp_path, n=10), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        done = classify(server, src, cp, *BATCH_API, "--chunk-requests", "5")
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert calls.count("list") >= 3 and "found at the provider" in done.stderr
    assert stats["batches_created"] == 1 and stats["items_paid_twice"] == 0
    assert len(answers(cp)) == 10


def test_a_create_that_may_have_made_the_batch_is_never_followed_by_a_refused_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first create makes the batch but its answer is lost; the list does not show it
    # at the first look; a second create would be refused. The chunk was ended as
    # refused, and the next run made its batch again (paid twice: a review). Now it looks
    # again (the list may lag) and finds it; were the second create refused, the chunk
    # would stay open (``fresh`` in _make_batch).
    calls = lose_the_first_create(monkeypatch, hidden_looks=1)
    src, cp = reviews(tmp_path, n=10), tmp_path / "out.jsonl"
    with LLMServerThread(LLMServerOptions(batch_seconds=0.1)) as server:
        done = classify(server, src, cp, *BATCH_API, "--chunk-requests", "5")
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert "found at the provider" in done.stderr and calls.count("create") == 1
    assert stats["items_paid_twice"] == 0 and stats["batches_created"] == 1
    assert len(answers(cp)) == 10
    ledger = Ledger(ledger_path(cp))
    ledger.open()
    ledger.close()
    assert [c.ended for c in ledger.chunks.values()] == ["completed"]


def test_after_a_refused_batch_the_next_batch_api_run_asks_its_items_again(
    tmp_path: Path,
) -> None:
    src, cp = reviews(tmp_path), tmp_path / "out.jsonl"
    options = LLMServerOptions(batch_seconds=0.05, refuse_batches=True)
    with LLMServerThread(options) as server:
        assert classify(server, src, cp, *BATCH_API).returncode != 0
        server.server.options = replace(options, refuse_batches=False)
        done = classify(server, src, cp, *BATCH_API)
        stats = server.server.snapshot()
    assert done.returncode == 0, done.stderr
    assert len(answers(cp)) == 47 and stats["items_paid_twice"] == 0
