"""The batch progress line: what it says, and that a job runs with it on a terminal."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

from rich.console import Console

from crashsafe.batch.items import read_items
from crashsafe.batch.progress import BatchProgress, progress_line
from crashsafe.batch.runner import BatchRunner, BatchSettings, BatchSummary
from crashsafe.batch.task import TaskCaller


def test_the_line_says_items_rate_eta_tokens_and_spend() -> None:
    s = BatchSummary(to_do=200, items_ok=120, batches_failed=1, spent=0.0024)
    s.usage = {"prompt_tokens": 5653, "completion_tokens": 2557}
    line = progress_line(s, 3.0, priced=True)
    assert line == (
        "items 120/200 (60%)  40/s  ETA 2 s  tokens in 5,653 out 2,557  spent 0.0024  "
        "failed batches 1"
    )
    assert progress_line(BatchSummary(to_do=10), 0.0, priced=False) == "items 0/10 (0%)"


def test_a_job_on_a_terminal_shows_the_line_instead_of_a_line_per_batch(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("".join(f"review {n}\n" for n in range(30)))
    echoed: list[str] = []
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)

    def task(items: list[object]) -> list[dict[str, int]]:
        return [{"n": 1} for _ in items]

    runner = BatchRunner(
        TaskCaller(task, threads=2),
        read_items(src),
        tmp_path / "cp.jsonl",
        BatchSettings(batch_size=10),
        echo=echoed.append,
        handle_signals=False,
    )
    runner.progress = BatchProgress(runner.summary, priced=False, console=console)
    summary = asyncio.run(runner.run())
    assert summary.items_ok == 30
    assert not any(": 10/10 ok" in line for line in echoed)  # the live line says it
    assert "items 30/30 (100%)" in out.getvalue()  # the last redraw
