"""Run a batch job: N items per call, K calls in flight, a checkpoint line per batch.

A batch is done when its line is on disk (written, flushed, fsync'd); until then it is not.
So SIGKILL loses only the batches in flight, and a rerun skips every id already written.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from crashsafe.batch.checkpoint import (
    Checkpoint,
    dead_letter_path,
    dead_lines,
    encode_line,
    text_hash,
)
from crashsafe.batch.items import Inputs, Item
from crashsafe.batch.progress import BatchProgress
from crashsafe.batch.task import BatchOutput, TaskCaller, Usage, add_usage
from crashsafe.errors import ConfigError, CrashsafeError
from crashsafe.files import open_private
from crashsafe.interrupts import GracefulInterrupts, stopping_line
from crashsafe.tracing import span, tracer_from_env

SPEND_MARGIN = 1.5  # a batch is expected to cost at most this × the costliest one so far


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """How a batch job runs.

    Attributes:
        batch_size: items per task call.
        concurrency: task calls in flight.
        max_attempts: calls of one batch in this run before it goes to the dead letter.
        backoff_base, backoff_max: seconds between attempts, doubling, with jitter.
        grace_seconds: after Ctrl-C, time for in-flight batches to finish and be written.
        price_in, price_out: price per million prompt/completion tokens (for the spend).
        max_spend: stop scheduling before this run could spend more than this: a batch
            starts only if the spend so far, what the batches in flight may cost and what
            it may cost (each ``SPEND_MARGIN`` × the costliest batch so far; one batch at a
            time until the first cost is known) fit under it. It is exceeded only when
            batches in flight cost more than that estimate. Per run: a rerun starts at 0.
        max_spend_total: the same cap for the job as a whole: what the checkpoint and its
            dead letter record as spent by earlier runs counts too, so a crash loop cannot
            reset the budget (calls cut off by a kill before their line was written are
            not recorded: at most the batches in flight, per kill).
        stop_after: stop scheduling after this many batches (used to demonstrate resume).
        keep_changed: keep the answers of items whose text changed since they were
            answered, instead of asking again.
        accept_changed: go on with a checkpoint whose answers were made by another job
            (other labels, model or prompt), keeping them.
    """

    batch_size: int = 10
    concurrency: int = 4
    max_attempts: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    grace_seconds: float = 30.0
    price_in: float = 0.0
    price_out: float = 0.0
    max_spend: float | None = None
    max_spend_total: float | None = None
    stop_after: int | None = None
    keep_changed: bool = False
    accept_changed: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.concurrency < 1 or self.max_attempts < 1:
            raise ConfigError("--batch-size, --concurrency and --max-attempts must be >= 1")
        capped = self.max_spend is not None or self.max_spend_total is not None
        if capped and not (self.price_in or self.price_out):
            option = "--max-spend" if self.max_spend is not None else "--max-spend-total"
            raise ConfigError(
                f"{option} needs the model's prices: give --price-in and --price-out "
                "(per million prompt and completion tokens), or the cap could never be reached"
            )

    @property
    def capped(self) -> bool:
        return self.max_spend is not None or self.max_spend_total is not None

    def cost(self, usage: Usage) -> float:
        return (
            usage.get("prompt_tokens", 0) * self.price_in
            + usage.get("completion_tokens", 0) * self.price_out
        ) / 1e6


@dataclass(slots=True)
class BatchSummary:
    already_done: int = 0
    to_do: int = 0
    changed: int = 0  # answered for a text that has changed since (redone, or kept)
    batches_planned: int = 0
    batches_ok: int = 0
    batches_failed: int = 0
    items_ok: int = 0
    duplicates_folded: int = 0
    corrupt_lines: int = 0
    usage: Usage = field(default_factory=dict)
    spent: float = 0.0
    spent_before: float = 0.0  # by earlier runs, as the checkpoint records it
    elapsed: float = 0.0
    interrupted: bool = False
    stopped_by: str | None = None  # "spend cap" | "stop_after"

    def counts(self) -> dict[str, int]:
        return {
            "batches_ok": self.batches_ok,
            "batches_failed": self.batches_failed,
            "items_ok": self.items_ok,
        }


def batch_label(ids: Sequence[str]) -> str:
    return f"{ids[0][:6]}..{ids[-1][:6]}" if len(ids) > 1 else ids[0][:12]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class BatchRunner:
    def __init__(
        self,
        task: TaskCaller,
        inputs: Inputs,
        checkpoint_path: Path,
        settings: BatchSettings,
        *,
        echo: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
        handle_signals: bool = True,
        rng: random.Random | None = None,
        progress: BatchProgress | None = None,
        job: dict[str, Any] | None = None,
        whole_rows: bool = False,
    ) -> None:
        self.task = task
        self.job = job
        # What an answer depends on: the item's text (classify sends nothing else), or,
        # for a task that is handed the whole row, every field of it.
        self.whole_rows = whole_rows
        self.progress = progress
        self.inputs = inputs
        self.path = checkpoint_path
        self.settings = settings
        self.echo = echo
        self.handle_signals = handle_signals
        self.rng = rng or random.Random()
        self.tracer = tracer_from_env()  # a span per call when OTEL_* asks (tracing.py)
        self.summary = BatchSummary(duplicates_folded=inputs.duplicates)
        self._stopping = False
        self._stop_asked = asyncio.Event()  # wakes the scheduler out of its wait
        self._batch_cost = 0.0  # the most one batch has cost so far (spend cap)
        self._reserved = 0.0  # what the batches in flight may cost
        self._pending_lines: list[tuple[str, asyncio.Future[None]]] = []
        self._job_line: str | None = None  # to write before the first answer
        self._write_ready = asyncio.Event()

    # -- stopping --------------------------------------------------------------------------
    def request_stop(self) -> None:
        self._stopping = True
        self._stop_asked.set()

    def _on_signal(self) -> None:
        self.echo(stopping_line("finishing the batches in flight"))
        self.summary.interrupted = True
        self.request_stop()

    # -- writing ---------------------------------------------------------------------------
    async def _write(self, line: str) -> None:
        """Queue ``line``; resolves once it is on disk. Lines queued while a write is in
        progress go out together in the next write (one fsync for all)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending_lines.append((line, future))
        self._write_ready.set()
        await future

    async def _writer(self, checkpoint: Checkpoint) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._write_ready.wait()
            self._write_ready.clear()
            group, self._pending_lines = self._pending_lines, []
            if not group:
                continue
            try:
                lines = [line for line, _ in group]
                if self._job_line is not None:
                    lines.insert(0, self._job_line)
                    self._job_line = None
                await loop.run_in_executor(None, checkpoint.append_encoded, lines)
            except Exception as exc:
                for _, fut in group:
                    fut.set_exception(exc)
            else:
                for _, fut in group:
                    fut.set_result(None)

    def _dead_letter(self, ids: list[str], error: str, attempts: int, usage: Usage) -> None:
        line = {"ids": ids, "error": error, "attempts": attempts, "usage": usage}
        if self.settings.price_in or self.settings.price_out:
            line["cost"] = self.settings.cost(usage)
        line["failed_at"] = _now_iso()
        fd = open_private(dead_letter_path(self.path), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())

    # -- one batch -------------------------------------------------------------------------
    async def _run_batch(self, batch: list[Item], *, reserved: float = 0.0) -> None:
        try:
            await self._run_batch_once(batch)
        finally:
            self._reserved -= reserved

    async def _run_batch_once(self, batch: list[Item]) -> None:
        s = self.settings
        ids = [item.id for item in batch]
        label = batch_label(ids)
        usage: Usage = {}
        started = time.monotonic()
        error = ""
        for attempt in range(1, s.max_attempts + 1):
            model = getattr(getattr(self.task, "task", self.task), "model", None)
            try:
                with span(self.tracer, "batch.call", **{
                    "crashsafe.batch": label, "crashsafe.items": len(ids),
                    "crashsafe.attempt": attempt, "gen_ai.request.model": model,
                }) as call:  # fmt: skip
                    output: BatchOutput = await self.task(batch)
                    if call is not None:
                        call_usage = output.usage or {}
                        call.set_attribute(
                            "gen_ai.usage.input_tokens", call_usage.get("prompt_tokens", 0)
                        )
                        call.set_attribute(
                            "gen_ai.usage.output_tokens", call_usage.get("completion_tokens", 0)
                        )
                        call.set_attribute("crashsafe.cost", s.cost(call_usage))
            except CrashsafeError:
                raise  # the job cannot go on (an endpoint that refuses everything): stop it
            except Exception as exc:
                add_usage(usage, getattr(exc, "usage", {}) or {})
                error = f"{type(exc).__name__}: {exc}"
                if attempt < s.max_attempts:
                    delay = min(s.backoff_max, s.backoff_base * 2 ** (attempt - 1))
                    self.echo(f"batch {label}: attempt {attempt} failed ({error}); retrying")
                    await asyncio.sleep(delay * self.rng.uniform(0.5, 1.5))
                continue
            add_usage(usage, output.usage)
            elapsed = round(time.monotonic() - started, 4)
            line = {
                "batch": label,
                "ids": ids,
                "hashes": [self._hash(item) for item in batch],
                "results": list(output.results),
                "usage": usage,
                "attempts": attempt,
                "elapsed": elapsed,
                "finished_at": _now_iso(),
                "input_items": len(self.inputs.items),  # (done of how many: the console)
            }
            if s.price_in or s.price_out:
                line["cost"] = round(s.cost(usage), 9)
            try:
                encoded = encode_line(line)
            except (TypeError, ValueError) as exc:
                error = f"results are not JSON: {exc}"
                break  # the same task would return the same results: no point retrying
            await self._write(encoded)
            self._account(usage)
            self.summary.batches_ok += 1
            self.summary.items_ok += len(ids)
            tries = f", {attempt} attempts" if attempt > 1 else ""
            if self.progress is None:  # on a terminal the progress line says it
                self.echo(
                    f"batch {label}: {len(ids)}/{len(ids)} ok ({line['elapsed']:.2f} s{tries})"
                )
            return
        self._account(usage)
        self._dead_letter(ids, error, attempt, usage)
        self.summary.batches_failed += 1
        self.echo(f"batch {label}: FAILED after {attempt} attempt(s): {error}")

    def _account(self, usage: Usage) -> None:
        add_usage(self.summary.usage, usage)
        self.summary.spent += self.settings.cost(usage)  # a sum: prices may differ by line
        self._batch_cost = max(self._batch_cost, self.settings.cost(usage))

    # -- the job ---------------------------------------------------------------------------
    def _plan(self, done: dict[str, str | None]) -> list[list[Item]]:
        """The batches left: items never answered, and those answered for a text that has
        changed since (unless ``keep_changed``)."""
        todo = []
        for item in self.inputs.items:
            if item.id not in done:
                todo.append(item)
                continue
            answered_for = done[item.id]
            if answered_for is not None and answered_for != self._hash(item):
                self.summary.changed += 1
                if not self.settings.keep_changed:
                    todo.append(item)
        self.summary.already_done = len(self.inputs.items) - len(todo)
        self.summary.to_do = len(todo)
        size = self.settings.batch_size
        batches = [todo[i : i + size] for i in range(0, len(todo), size)]
        self.summary.batches_planned = len(batches)
        return batches

    async def run(self) -> BatchSummary:
        started = time.monotonic()
        try:
            async with GracefulInterrupts(self._on_signal, enabled=self.handle_signals):
                await self._run()
        finally:
            await self.task.aclose()
        self.summary.elapsed = time.monotonic() - started
        return self.summary

    async def _run(self) -> None:
        if self.progress is None:
            await self._run_job()
            return
        self.progress.start()
        try:
            await self._run_job()
        finally:
            await self.progress.stop()

    async def _run_job(self) -> None:
        with Checkpoint(self.path) as checkpoint:
            found = checkpoint.found
            self.summary.corrupt_lines = found.corrupt
            if found.torn_bytes:
                self.echo(
                    f"warning: cut an unfinished last line ({found.torn_bytes} bytes, a write "
                    f"a kill or a full disk cut short) from {self.path}; the items of any "
                    "answer in it will be asked again"
                )
            if found.corrupt:
                self.echo(
                    f"warning: {found.corrupt} corrupt line(s) in {self.path} skipped "
                    f"({found.corrupt_where()}); the items of any answer among them will "
                    "be asked again"
                )
            self._check_job(checkpoint)
            if self.settings.capped:
                # What a batch costs, known from the batches written: the first batch of
                # a rerun is reserved for like any other, not started blind.
                self._batch_cost = max(found.costs(self.settings.cost), default=0.0)
            if self.settings.max_spend_total is not None:
                self.summary.spent_before = sum(found.costs(self.settings.cost)) + sum(
                    self._dead_cost(line) for line in dead_lines(self.path)
                )
            batches = self._plan(found.answered())
            folded = (
                f" ({self.inputs.duplicates} duplicate(s) folded)" if self.inputs.duplicates else ""
            )
            s = self.summary
            self.echo(
                f"{s.already_done} already done, {s.to_do} to do in "
                f"{plural(len(batches), 'batch', 'batches')}{folded}"
            )
            if s.changed:
                what = "kept (--keep-changed)" if self.settings.keep_changed else "redone"
                self.echo(f"{plural(s.changed, 'item')} changed since answered: {what}")
            writer = asyncio.create_task(self._writer(checkpoint))
            try:
                await self._schedule(batches)
            finally:
                writer.cancel()

    def _hash(self, item: Item) -> str:
        if not self.whole_rows:
            return text_hash(item.text)
        return text_hash(item.text, {k: v for k, v in item.data.items() if v != item.text})

    def _check_job(self, checkpoint: Checkpoint) -> None:
        """Refuse to mix answers: the job that wrote the checkpoint's answers (its last
        job line) must be this one, or the change accepted. A checkpoint without a job
        line (new, or written before job lines were) gets this job's."""
        if self.job is None:
            return
        jobs = checkpoint.found.jobs
        last = jobs[-1] if jobs else None
        if last == self.job:
            return
        hashed = any("hashes" in line for line in checkpoint.found.lines)
        if last is None and hashed and not self.settings.accept_changed:
            # Answers written by a version that writes job lines, and none to be found:
            # the line was damaged or removed, and with it what the answers were for.
            raise ConfigError(
                f"{self.path} holds answers but its job line (task, labels, model) is "
                "missing or damaged, so what they were asked with cannot be checked: use a "
                "new --checkpoint, or --accept-changed to take this run's job for theirs"
            )
        if last is not None:
            changes = job_changes(last, self.job)
            if not self.settings.accept_changed:
                raise ConfigError(
                    f"{self.path} holds answers made with {changes}: use a new --checkpoint "
                    "for this job, or --accept-changed to keep the old answers and go on"
                )
            self.echo(f"--accept-changed: keeping the answers made with {changes}")
            checkpoint.append([{"job": self.job, "at": _now_iso()}])  # accepted, for good
            return
        # A new job's line goes with its first answer: one that answers nothing (its
        # endpoint is unreachable) leaves the checkpoint as it found it.
        self._job_line = encode_line({"job": self.job, "at": _now_iso()})

    def _dead_cost(self, line: dict[str, Any]) -> float:
        cost = line.get("cost")
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            return float(cost)
        usage = line.get("usage")
        return self.settings.cost(usage if isinstance(usage, dict) else {})

    async def _schedule(self, batches: list[list[Item]]) -> None:
        s = self.settings
        running: set[asyncio.Task[None]] = set()
        for started, batch in enumerate(batches):
            if self._stopping:
                break
            if s.stop_after is not None and started >= s.stop_after:
                self.summary.stopped_by = "stop_after"
                break
            # Under a spend cap, one batch at a time until one has shown what a batch
            # costs; then a batch starts only if what is spent, what the batches in flight
            # may cost and what it may cost fit under the cap.
            limit = s.concurrency if not s.capped or self._batch_cost else 1
            while len(running) >= limit and not self._stopping:
                # Wake on a stop too: the grace period starts when it is asked for, not
                # when the slowest call in flight happens to return.
                stop: asyncio.Future[Any] = asyncio.ensure_future(self._stop_asked.wait())
                waiting: set[asyncio.Future[Any]] = {stop, *running}
                try:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.cancel()
                done = {task for task in running if task.done()}
                running -= done
                _raise_first_error(done, running)
                limit = s.concurrency if not s.capped or self._batch_cost else 1
            if self._stopping:
                break
            reserve = 0.0
            if s.capped:
                reserve = self._batch_cost * SPEND_MARGIN
                if self.summary.spent + self._reserved + reserve > self._cap():
                    self.summary.stopped_by = "spend cap"
                    break
                self._reserved += reserve
            running.add(asyncio.create_task(self._run_batch(batch, reserved=reserve)))
        if running:
            grace = s.grace_seconds if self._stopping else None
            done, late = await asyncio.wait(running, timeout=grace)
            _raise_first_error(done, late)
            for task in late:
                task.cancel()
            if late:
                self.echo(f"{len(late)} batch(es) did not finish in the grace period: not written")
                await asyncio.gather(*late, return_exceptions=True)

    def _cap(self) -> float:
        """What this run may still spend under the caps, from 0 (spent by this run)."""
        s = self.settings
        caps = [] if s.max_spend is None else [s.max_spend]
        if s.max_spend_total is not None:
            caps.append(s.max_spend_total - self.summary.spent_before)
        return min(caps)


def plural(n: int, one: str, many: str | None = None) -> str:
    """``1 batch``, ``2 batches``, ``0 items``."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def job_changes(old: dict[str, Any], new: dict[str, Any]) -> str:
    """``--labels spam,ham (this run: positive,negative)``: what differs, for messages."""
    said = []
    for name in sorted(old.keys() | new.keys()):
        was, now = old.get(name), new.get(name)
        if was == now:
            continue
        if name == "prompt":
            said.append(f"another prompt ({was}; this run: {now})")
        elif name == "labels":
            said.append(f"--labels {','.join(was or [])} (this run: {','.join(now or [])})")
        else:
            said.append(f"--{name} {was} (this run: {now})")
    return "; ".join(said)


def _raise_first_error(done: set[asyncio.Task[None]], others: set[asyncio.Task[None]]) -> None:
    """A batch task only raises when the job cannot go on (the checkpoint cannot be
    written, the endpoint refuses everything): stop everything, raising the first error
    (the others, often the same one from the batches beside it, are taken as seen)."""
    errors = [t.exception() for t in done | others if t.done() and not t.cancelled()]
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        for other in others:
            other.cancel()
        raise first
