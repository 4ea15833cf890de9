"""Batch checkpoint costs: fsync'd JSONL vs no checkpoint, and resuming over 1M items.

    .venv/bin/python benchmarks/batch_checkpoint.py [--items 2000] [--task-ms 50]
                                                    [--resume-items 1000000] [--repeat 3]

1. Overhead: the same job (``--items`` items, 10 per batch, 4 in flight, each call an
   asyncio sleep of ``--task-ms``) run by crashsafe's BatchRunner (a line per batch,
   flushed and fsync'd) and by a bare asyncio loop that keeps results in memory only. The
   peer is that bare loop, measured in the same run.
2. Resume: a checkpoint holding ``--resume-items`` done items, and an input of as many;
   time from start to "all done, nothing to do" (read input, read checkpoint, plan).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from crashsafe.batch.items import Item, read_items
from crashsafe.batch.runner import BatchRunner, BatchSettings
from crashsafe.batch.task import TaskCaller


def make_input(path: Path, n: int) -> None:
    with path.open("w") as f:
        for k in range(n):
            f.write(json.dumps({"id": f"r{k:07d}", "text": f"review number {k}, fine"}) + "\n")


def crashsafe_job(src: Path, checkpoint: Path, task_ms: float) -> float:
    async def task(items: list[Item]) -> list[dict[str, str]]:
        await asyncio.sleep(task_ms / 1000)
        return [{"label": "neutral"} for _ in items]

    runner = BatchRunner(
        TaskCaller(task, threads=4),
        read_items(src),
        checkpoint,
        BatchSettings(batch_size=10, concurrency=4),
        echo=lambda _line: None,
        handle_signals=False,
    )
    started = time.perf_counter()
    asyncio.run(runner.run())
    return time.perf_counter() - started


def bare_job(src: Path, task_ms: float) -> float:
    """The peer: same batches, same concurrency, results kept in memory only."""

    async def main() -> None:
        items = read_items(src).items
        batches = [items[i : i + 10] for i in range(0, len(items), 10)]
        results: dict[str, str] = {}
        gate = asyncio.Semaphore(4)

        async def one(batch: list[Item]) -> None:
            async with gate:
                await asyncio.sleep(task_ms / 1000)
                results.update((item.id, "neutral") for item in batch)

        await asyncio.gather(*(one(b) for b in batches))

    started = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - started


def resume_time(src: Path, checkpoint: Path) -> float:
    async def never(items: list[Item]) -> list[None]:
        raise AssertionError("everything is done: nothing should run")

    started = time.perf_counter()
    inputs = read_items(src)
    runner = BatchRunner(
        TaskCaller(never, threads=1),
        inputs,
        checkpoint,
        BatchSettings(),
        echo=lambda _line: None,
        handle_signals=False,
    )
    summary = asyncio.run(runner.run())
    assert summary.to_do == 0 and summary.already_done == len(inputs.items)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--task-ms", type=float, default=50.0)
    parser.add_argument("--resume-items", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crashsafe-bench-", dir=".") as tmp:
        root = Path(tmp)
        src = root / "in.jsonl"
        make_input(src, args.items)
        ours, peer = [], []
        for rep in range(args.repeat):
            peer.append(bare_job(src, args.task_ms))
            ours.append(crashsafe_job(src, root / f"cp{rep}.jsonl", args.task_ms))
        t_ours, t_peer = statistics.median(ours), statistics.median(peer)
        batches = args.items // 10
        print(f"\n1) {args.items} items, {batches} batches of 10, 4 in flight, "
              f"{args.task_ms:g} ms per call; medians of {args.repeat}")  # fmt: skip
        print(f"{'job':<36} {'seconds':>8} {'per batch ms':>13}")
        print(f"{'bare asyncio loop (no checkpoint)':<36} {t_peer:>8.2f} "
              f"{t_peer / batches * 1000:>13.2f}")  # fmt: skip
        print(f"{'crashsafe (fsync per batch line)':<36} {t_ours:>8.2f} "
              f"{t_ours / batches * 1000:>13.2f}")  # fmt: skip
        print(f"checkpoint overhead: {(t_ours - t_peer) / t_peer * 100:+.1f} % of the job")

        big = root / "big.jsonl"
        make_input(big, args.resume_items)
        checkpoint = root / "big-results.jsonl"
        with checkpoint.open("w") as f:
            for start in range(0, args.resume_items, 10):
                ids = [f"r{k:07d}" for k in range(start, min(start + 10, args.resume_items))]
                line = {
                    "batch": f"{ids[0]}..{ids[-1]}",
                    "ids": ids,
                    "results": [{"label": "neutral"}] * len(ids),
                    "usage": {"prompt_tokens": 400, "completion_tokens": 150, "calls": 1},
                    "attempts": 1,
                    "elapsed": 0.8,
                    "finished_at": "2026-11-30T00:00:00Z",
                }
                f.write(json.dumps(line) + "\n")
        size_mb = checkpoint.stat().st_size / 2**20
        times = [resume_time(big, checkpoint) for _ in range(args.repeat)]
        print(f"\n2) resume over {args.resume_items:,} done items "
              f"({size_mb:.0f} MB checkpoint, {args.resume_items // 10:,} lines)")  # fmt: skip
        print(f"start to 'nothing to do' (read input, read checkpoint, plan): "
              f"{statistics.median(times):.2f} s (median of {args.repeat})")  # fmt: skip


if __name__ == "__main__":
    main()
