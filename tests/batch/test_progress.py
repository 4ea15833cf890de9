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


def run_on_a_terminal(args: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run ``crashsafe *args`` with its stderr on a pseudo-terminal; its exit status and
    everything it drew there."""
    import os
    import select
    import subprocess
    import time

    from tests.helpers import CLI, cli_env

    master, slave = os.openpty()
    env = cli_env() | {"TERM": "xterm-256color", "COLUMNS": "160"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=slave, env=env)
    os.close(slave)
    drawn = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:  # read as it draws: a full terminal would block it
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child is gone and the terminal closed
                    break
                if not chunk:
                    break
                drawn += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=30), drawn.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()  # by its PID: the job this helper started
            proc.wait()
        os.close(master)


def test_batch_run_on_a_terminal_draws_the_live_line(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "in.txt"
    src.write_text("".join(f"review {n}\n" for n in range(30)))
    task = f"{root / 'examples' / 'word_count.py'}:count_words"
    args = ["batch", "run", str(src), "--task", task, "--batch-size", "10"]
    code, drawn = run_on_a_terminal([*args, "--checkpoint", str(tmp_path / "cp.jsonl")])
    assert code == 0, drawn
    assert "items 30/30 (100%)" in drawn, drawn  # the live line, drawn on the terminal
    assert "10/10 ok" not in drawn  # instead of a line per batch
    assert "30 items in 3 batches" in drawn  # the summary stays
    quiet = [*args, "--checkpoint", str(tmp_path / "quiet.jsonl"), "--no-progress"]
    code, drawn = run_on_a_terminal(quiet)
    assert code == 0 and "items 30/30" not in drawn and drawn.count("10/10 ok") == 3, drawn
