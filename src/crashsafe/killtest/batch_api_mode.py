"""``crashsafe killtest --mode batch-api``: SIGKILL a job that runs through a provider's
Batch API, at every step of a chunk's life, again and again.

The stand-in (``crashsafe batch llm-server``: Files and Batches endpoints) runs as its own
process and counts every batch created, every item submitted in more than one batch and
every item billed twice; its batches run whether or not their submitter lives. A naive
job (upload, create, poll, then write: the usual script) and ``crashsafe batch classify
--via batch-api`` are killed at the same seeded points: each start stops at a named step
(``CRASHSAFE_KILL_AT``: before an upload, after it, after its id is written, after a
batch is created, after its id is written, after a poll, after an answer is written) or
after a seeded number of its calls to the API (the stand-in counts them: never the
clock), then a last start runs to the end. Then we count.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crashsafe.batch.batchapi.runner import KILL_AT
from crashsafe.batch.items import read_items
from crashsafe.batch.testserver import label_for
from crashsafe.errors import CrashsafeError
from crashsafe.killtest.batch_mode import (
    BATCH_SIZE,
    CALLS,
    LABELS,
    LLMServerProcess,
    _stored,
    sample_path,
)
from crashsafe.killtest.runner import stop_process

# Where a start is killed, and the highest occurrence drawn for each (a step seen once per
# chunk, a poll a few times, an answer once per request; "call": by the kill test, once
# the stand-in has seen the start's n-th call to the API, whatever the job is doing then).
STEPS = {"intent": 2, "uploaded": 2, "file": 2, "created": 2, "batch": 2, "polled": 4,
         "answer": 6, "call": 3}  # fmt: skip
SUBMISSION = ("intent", "uploaded", "file", "created", "batch")


@dataclass(frozen=True, slots=True)
class BatchApiKillOptions:
    runs: int = 3
    kills: int = 8
    seed: int = 0
    chunk_requests: int = 2  # 20 requests: 10 chunks
    batch_seconds: float = 0.5
    poll_seconds: float = 0.1


@dataclass(slots=True)
class BatchApiOutcome:
    job: str
    rows: int = 0
    distinct: int = 0
    wrong: int = 0
    missing: int = 0
    batches_created: int = 0
    items_submitted_twice: int = 0
    items_paid_twice: int = 0
    items_billed: int = 0
    kills: list[str] = field(default_factory=list)  # the kills that landed: "step:n"
    seconds: float = 0.0
    final_exit: int = 0
    problems: list[str] = field(default_factory=list)


def kill_schedule(options: BatchApiKillOptions, run: int) -> list[str]:
    """``kills`` kill points for a run: every step, each at a seeded occurrence, the steps
    of a submission first (they happen only while chunks are left to submit), then the
    others, each group in a seeded order; repeated when there are more kills than steps."""
    rng = random.Random(options.seed * 1000 + run)
    points: list[str] = []
    while len(points) < options.kills:
        for group in (SUBMISSION, [s for s in STEPS if s not in SUBMISSION]):
            steps = list(group)
            rng.shuffle(steps)
            points += [f"{step}:{rng.randint(1, STEPS[step])}" for step in steps]
    return points[: options.kills]


def _commands(job: str, workdir: Path, base_url: str, options: BatchApiKillOptions) -> list[str]:
    if job == "naive":
        return [
            sys.executable, "-m", "crashsafe.demo.naive_batch_api", str(sample_path()),
            str(workdir / "naive.jsonl"), base_url, ",".join(LABELS),
            str(options.chunk_requests), str(options.poll_seconds),
        ]  # fmt: skip
    return [
        sys.executable, "-m", "crashsafe", "batch", "classify", str(sample_path()),
        "--checkpoint", str(workdir / "results.jsonl"), "--labels", ",".join(LABELS),
        "--base-url", base_url, "--batch-size", str(BATCH_SIZE), "--via", "batch-api",
        "--chunk-requests", str(options.chunk_requests),
        "--poll-seconds", str(options.poll_seconds), "--no-progress",
    ]  # fmt: skip


def _start(
    cmd: list[str], point: str, server: LLMServerProcess, options: BatchApiKillOptions
) -> bool:
    """Start ``cmd`` to be killed at ``point``; True if the kill landed (False: the job
    ended first). Kills follow the job's own steps and calls, never the clock."""
    step, _, nth = point.partition(":")
    env = {**os.environ, "OPENAI_API_KEY": "local"}
    if step != "call":
        env[KILL_AT] = point  # the job kills itself there
    before = server.stats()["api_calls"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if step == "call" and server.stats()["api_calls"] >= before + int(nth):
            stop_process(proc, signal.SIGKILL)
            return True
        time.sleep(0.005 if step == "call" else 0.05)
    if proc.poll() is None:
        stop_process(proc, signal.SIGKILL)
        raise CrashsafeError(f"{' '.join(cmd[:4])}: no end in 300 s at {point}")
    return proc.returncode == -signal.SIGKILL


def _settle(server: LLMServerProcess, options: BatchApiKillOptions) -> dict[str, int]:
    """The stand-in's figures once every batch, even one whose submitter died, has ended."""
    deadline = time.monotonic() + 30 + 4 * options.batch_seconds
    stats: dict[str, int] = server.stats()
    while stats["batches_running"] and time.monotonic() < deadline:
        time.sleep(options.batch_seconds / 4)
        stats = server.stats()
    return stats


def run_job(
    job: str,
    server: LLMServerProcess,
    workdir: Path,
    points: list[str],
    options: BatchApiKillOptions,
) -> BatchApiOutcome:
    workdir.mkdir(parents=True, exist_ok=True)
    server.reset()
    cmd = _commands(job, workdir, server.base_url, options)
    outcome = BatchApiOutcome(job)
    started = time.monotonic()
    for point in points:
        if not _start(cmd, point, server, options):
            break  # it finished first: the job is done, later kills are moot
        outcome.kills.append(point)
    final = subprocess.run(
        cmd, capture_output=True, timeout=900, env={**os.environ, "OPENAI_API_KEY": "local"}
    )
    outcome.final_exit = final.returncode
    outcome.seconds = time.monotonic() - started
    stats = _settle(server, options)
    texts = {item.id: item.text for item in read_items(sample_path()).items}
    rows = _stored(job if job == "naive" else "crashsafe", workdir)
    counts = Counter(i for i, _ in rows if i in texts)
    outcome.rows = len(rows)
    outcome.distinct = len(counts)
    outcome.missing = len(texts) - len(counts)
    outcome.wrong = sum(
        1 for i, label in rows if i not in texts or label != label_for(texts[i], LABELS)
    )
    outcome.batches_created = stats["batches_created"]
    outcome.items_submitted_twice = stats["items_submitted_twice"]
    outcome.items_paid_twice = stats["items_paid_twice"]
    outcome.items_billed = stats["items_billed"]
    if job == "crashsafe":
        checks = [
            (outcome.rows != outcome.distinct,
             f"{outcome.rows - outcome.distinct} items stored twice"),
            (outcome.missing > 0, f"{outcome.missing} items missing"),
            (outcome.wrong > 0, f"{outcome.wrong} wrong labels"),
            (stats["chunks_submitted_twice"] > 0,
             f"{stats['chunks_submitted_twice']} chunks submitted twice"),
            (outcome.items_submitted_twice > 0,
             f"{outcome.items_submitted_twice} items submitted twice"),
            (outcome.items_paid_twice > 0, f"{outcome.items_paid_twice} items paid twice"),
            (outcome.final_exit != 0, f"final run exited {outcome.final_exit}: "
             f"{final.stderr.decode(errors='replace')[-500:]}"),
        ]  # fmt: skip
        outcome.problems = [message for failed, message in checks if failed]
    return outcome


def run_batch_api_killtest(
    options: BatchApiKillOptions,
    *,
    workdir: Path | None = None,
    on_progress: Callable[[str], None] = lambda _msg: None,
) -> list[dict[str, BatchApiOutcome]]:
    runs: list[dict[str, BatchApiOutcome]] = []
    with tempfile.TemporaryDirectory(prefix="crashsafe-killtest-batch-api-") as tmp:
        root = workdir or Path(tmp)
        with LLMServerProcess(0.0, "--batch-seconds", str(options.batch_seconds)) as server:
            for run in range(options.runs):
                points = kill_schedule(options, run)
                outcomes = {}
                for job in ("naive", "crashsafe"):
                    out = run_job(job, server, root / f"run{run + 1}-{job}", points, options)
                    outcomes[job] = out
                    on_progress(
                        f"run {run + 1}/{options.runs} {job}: {out.rows} stored, "
                        f"{out.batches_created} batches, {out.items_submitted_twice} items "
                        f"submitted twice, {out.items_paid_twice} paid twice, "
                        f"{len(out.kills)} kills landed"
                    )
                runs.append(outcomes)
    return runs


__all__ = ["CALLS", "BatchApiKillOptions", "BatchApiOutcome", "run_batch_api_killtest"]
