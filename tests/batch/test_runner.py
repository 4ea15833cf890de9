"""The batch runner in-process: resume, retries, dead letter, group fsync."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from crashsafe.batch.checkpoint import dead_letter_path, scan
from crashsafe.batch.items import Inputs, Item, read_items
from crashsafe.batch.runner import BatchRunner, BatchSettings, BatchSummary
from crashsafe.batch.task import BatchOutput, TaskCaller


def make_input(tmp_path: Path, n: int = 25) -> Inputs:
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"id": f"i{k:03d}", "text": f"t{k}"}) + "\n" for k in range(n))
    )
    return read_items(src)


def run(task: Any, inputs: Inputs, checkpoint: Path, **settings: Any) -> BatchSummary:
    runner = BatchRunner(
        TaskCaller(task, threads=4),
        inputs,
        checkpoint,
        BatchSettings(**{"backoff_base": 0.01, **settings}),
        echo=lambda _line: None,
        handle_signals=False,
    )
    return asyncio.run(runner.run())


class Recorder:
    """A sync task that records its calls; batches holding ``fail_ids`` raise
    ``fail_times`` times (None: always)."""

    def __init__(self, fail_ids: frozenset[str] = frozenset(), fail_times: int | None = None):
        self.calls: list[list[str]] = []
        self.fail_ids = fail_ids
        self.fail_times = fail_times

    def __call__(self, items: list[Item]) -> BatchOutput:
        self.calls.append([i.id for i in items])
        if self.fail_ids & {i.id for i in items}:
            if self.fail_times is None:
                raise RuntimeError("always fails")
            if self.fail_times > 0:
                self.fail_times -= 1
                raise RuntimeError("flaky")
        return BatchOutput([{"len": len(i.text)} for i in items], {"prompt_tokens": 10})


def test_resume_skips_what_is_written(tmp_path: Path) -> None:
    inputs, cp = make_input(tmp_path), tmp_path / "r.jsonl"
    first = Recorder()
    s1 = run(first, inputs, cp, batch_size=5, stop_after=2)
    assert (s1.batches_ok, s1.items_ok, s1.stopped_by) == (2, 10, "stop_after")
    second = Recorder()
    s2 = run(second, inputs, cp, batch_size=5)
    assert s2.already_done == 10 and s2.to_do == 15 and s2.batches_ok == 3
    done_first = {i for c in first.calls for i in c}
    assert not done_first & {i for c in second.calls for i in c}  # nothing paid twice
    assert scan(cp).done_ids() == {i.id for i in inputs.items}
    third = Recorder()
    s3 = run(third, inputs, cp, batch_size=5)
    assert third.calls == [] and s3.already_done == 25 and s3.to_do == 0


def test_flaky_batch_is_retried_within_the_run(tmp_path: Path) -> None:
    inputs, cp = make_input(tmp_path, 10), tmp_path / "r.jsonl"
    task = Recorder(frozenset({"i003"}), fail_times=2)
    summary = run(task, inputs, cp, batch_size=5, max_attempts=3)
    assert summary.batches_ok == 2 and summary.batches_failed == 0
    [retried] = [entry for entry in scan(cp).lines if "i003" in entry["ids"]]
    assert retried["attempts"] == 3


def test_failed_batch_goes_to_dead_letter_and_is_retried_next_run(tmp_path: Path) -> None:
    inputs, cp = make_input(tmp_path, 10), tmp_path / "r.jsonl"
    summary = run(Recorder(frozenset({"i007"})), inputs, cp, batch_size=5, max_attempts=2)
    assert (summary.batches_ok, summary.batches_failed, summary.items_ok) == (1, 1, 5)
    [dead] = [json.loads(x) for x in dead_letter_path(cp).read_text().splitlines()]
    assert "i007" in dead["ids"] and dead["attempts"] == 2 and "always fails" in dead["error"]
    assert "i007" not in scan(cp).done_ids()
    healed = Recorder()
    again = run(healed, inputs, cp, batch_size=5)
    assert again.already_done == 5 and again.batches_ok == 1
    assert healed.calls == [[f"i{k:03d}" for k in range(5, 10)]]


def test_async_task_and_wrong_result_count(tmp_path: Path) -> None:
    inputs, cp = make_input(tmp_path, 6), tmp_path / "r.jsonl"

    async def good(items: list[Item]) -> list[str]:
        await asyncio.sleep(0.01)
        return [i.text.upper() for i in items]

    assert run(good, inputs, cp, batch_size=3).items_ok == 6
    assert {r for entry in scan(cp).lines for r in entry["results"]} == {f"T{k}" for k in range(6)}

    def short(items: list[Item]) -> list[int]:
        return [1]

    cp2 = tmp_path / "r2.jsonl"
    summary = run(short, inputs, cp2, batch_size=3, max_attempts=1)
    assert summary.batches_failed == 2
    assert "returned 1 results for 3 items" in dead_letter_path(cp2).read_text()


def test_batches_finishing_together_share_one_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from crashsafe.batch import checkpoint

    writes: list[int] = []
    original = checkpoint.Checkpoint.append_encoded

    def counting(self: checkpoint.Checkpoint, lines: Any) -> None:
        writes.append(len(lines))
        original(self, lines)

    monkeypatch.setattr(checkpoint.Checkpoint, "append_encoded", counting)
    inputs, cp = make_input(tmp_path, 40), tmp_path / "r.jsonl"

    async def instant(items: list[Item]) -> list[int]:
        return [0] * len(items)

    summary = run(instant, inputs, cp, batch_size=1, concurrency=8)
    assert summary.batches_ok == 40 and sum(writes) == 40
    assert len(writes) < 40  # some lines shared an fsync


def test_results_strict_json_cannot_hold_fail_the_batch_not_the_file(tmp_path: Path) -> None:
    inputs, cp = make_input(tmp_path, 4), tmp_path / "r.jsonl"

    def nan(items: list[Item]) -> list[float]:
        return [float("nan")] * len(items)

    summary = run(nan, inputs, cp, batch_size=2)
    assert summary.batches_failed == 2 and summary.batches_ok == 0
    assert "results are not JSON" in dead_letter_path(cp).read_text()
    assert scan(cp).lines == [] and scan(cp).corrupt == 0
