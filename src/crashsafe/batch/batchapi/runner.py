"""A classification job through a provider's Batch API, at its batch prices, with the
checkpoint's guarantee: every item answered exactly once in the checkpoint, no chunk
submitted twice, nothing paid twice, whatever line the run is killed at.

The job is the synchronous one (``BatchRunner``: the same checkpoint, job line, plan,
dead letter and summary); only how the planned requests are sent differs:

1. requests (``--batch-size`` items each, the same prompt as a synchronous call) are cut
   into chunks under the provider's limits, each written to the ledger (``ledger.py``)
   before its file is uploaded, then its file id, then its batch id;
2. the batches are polled, with a growing interval, saying how they stand;
3. an ended batch's output and error files are read: each valid answer is appended to
   the checkpoint (fsync'd, as a synchronous batch is), then the chunk is marked ended;
   requests that failed, or that an expired or cancelled batch never ran, go into a new
   chunk (up to ``--max-attempts`` in a run), then to the dead letter.

A run killed at any point finds in the ledger how far each chunk got, asks the provider
for what it does not know (a file by its name, a batch by its metadata), and goes on
from there; requests of a chunk still running are never planned again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import signal
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from crashsafe.batch.batchapi.ledger import (
    Chunk,
    Ledger,
    checkpoint_file,
    ledger_path,
    refuse_hard_links,
)
from crashsafe.batch.batchapi.provider import Answer, BatchState, MaybeMade, Pending, Provider
from crashsafe.batch.checkpoint import encode_line
from crashsafe.batch.items import Inputs, Item
from crashsafe.batch.runner import BatchRunner, BatchSettings, _now_iso, job_changes, plural
from crashsafe.batch.task import TaskCaller, Usage, add_usage
from crashsafe.errors import ConfigError, EndpointError
from crashsafe.interrupts import stopping_line

if TYPE_CHECKING:
    from crashsafe.batch.llm import PromptTask

KILL_AT = "CRASHSAFE_KILL_AT"  # tests: "step" or "step:n" SIGKILLs the run there
STOP_GRACE = 3.0  # seconds a stopping run's provider call gets before it is cut


def killpoint(step: str, _seen: dict[str, int] = {}) -> None:  # noqa: B006 (a counter)
    """For the tests of each reconciliation point: when ``CRASHSAFE_KILL_AT`` names this
    step (``step`` or ``step:n``, the n-th time), the process SIGKILLs itself here."""
    wanted = os.environ.get(KILL_AT)
    if not wanted:
        return
    name, _, nth = wanted.partition(":")
    if name != step:
        return
    _seen[step] = _seen.get(step, 0) + 1
    if _seen[step] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class BatchApiOptions:
    """How a job uses the Batch API.

    Attributes:
        poll_seconds, poll_max: the first wait between two looks at the batches, and the
            longest (it grows by half each time nothing changed).
        chunk_requests, chunk_bytes: a chunk's limits (OpenAI: 50 000 requests, 200 MB;
            a megabyte read as 10**6 bytes, the smaller reading).
        discount: batch prices as a share of ``--price-in``/``--price-out`` (0.5: half).
        output_tokens_per_item: ``max_tokens`` of a request is this per item, plus 20: the
            worst case a spend cap is checked against.
        finish_sync_below: once fewer items than this are left to ask and no batch runs,
            they are asked synchronously, at full price (``--via auto``: 100).
    """

    poll_seconds: float = 30.0
    poll_max: float = 300.0
    chunk_requests: int = 50_000
    chunk_bytes: int = 200 * 10**6
    discount: float = 0.5
    output_tokens_per_item: int = 40
    finish_sync_below: int = 0
    provider: str = "openai"
    api_key: str = ""  # the provider's, when not the classifier's (ANTHROPIC_API_KEY)


LIST_SETTLES = 30.0  # seconds a provider's batch list may lag behind a batch just made


def custom_id(job_id: str, ids: Sequence[str]) -> str:
    """A request's ``custom_id``: the job's id and a hash of its items' ids."""
    return f"{job_id}-{hashlib.sha256(chr(10).join(ids).encode()).hexdigest()[:24]}"


def make_provider(classifier: PromptTask, options: BatchApiOptions) -> Provider:
    secrets = [*classifier._secrets, options.api_key]
    if options.provider == "anthropic":
        from crashsafe.batch.batchapi.anthropic_provider import (
            AnthropicBatches,
            anthropic_client,
        )

        key = options.api_key or classifier._secrets[0]
        client = anthropic_client(classifier.raw_base_url, key)
        return AnthropicBatches(client, base_url=classifier.base_url, secrets=secrets)
    from crashsafe.batch.batchapi.openai_provider import OpenAIBatches

    return OpenAIBatches(classifier.client, base_url=classifier.base_url, secrets=secrets)


def batch_prices(settings: BatchSettings, discount: float) -> BatchSettings:
    return replace(
        settings, price_in=settings.price_in * discount, price_out=settings.price_out * discount
    )


class BatchApiRunner(BatchRunner):
    def __init__(
        self,
        classifier: PromptTask,
        inputs: Inputs,
        checkpoint_path: Path,
        settings: BatchSettings,
        options: BatchApiOptions,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            TaskCaller(classifier, threads=1), inputs, checkpoint_path,
            batch_prices(settings, options.discount), job=classifier.job(), **kwargs,
        )  # fmt: skip
        self.classifier = classifier
        self.options = options
        self._full_prices = settings
        self.provider = make_provider(classifier, options)
        self.provider.say = self.echo
        self._answered: set[str] = set()
        self._by_id = {item.id: item for item in inputs.items}
        self._run_id = f"r{int(time.time())}-{os.getpid()}"
        self._told: dict[str, str] = {}  # what was said of each chunk
        self._status: dict[str, str] = {}  # each chunk's last status seen
        self._held: dict[str, float] = {}  # chunk -> its worst cost, reserved under a cap
        self._looked: set[str] = set()  # chunks whose batch this run may have made

    def _plan(self, done: dict[str, str | None]) -> list[list[Item]]:
        batches = super()._plan(done)
        # answered for the text asked now: items whose text changed since are asked again
        self._answered = set(done) - {item.id for batch in batches for item in batch}
        return batches

    # -- requests --------------------------------------------------------------------------
    def _max_tokens(self, n: int) -> int:
        return self.options.output_tokens_per_item * n + 20

    def _request(self, job_id: str, ids: list[str], items: list[Item]) -> dict[str, Any]:
        body = self.classifier.request_body(items, max_tokens=self._max_tokens(len(items)))
        return self.provider.request(custom_id(job_id, ids), body)

    def _requests_of(self, job_id: str, chunk: Chunk) -> list[dict[str, Any]]:
        """The chunk's requests, built again from its intent (the same bytes, for the
        same input: a rebuild after a kill sends what the first try would have)."""
        found = []
        for group in chunk.groups:
            items = [self._by_id[i] for i in group if i in self._by_id]
            if items:
                found.append(self._request(job_id, group, items))
        return found

    def _sent(self, chunk: Chunk) -> int:
        """How many of ``chunk``'s requests are sent: those with an item still in the input."""
        return sum(1 for group in chunk.groups if any(i in self._by_id for i in group))

    def _worst_cost(self, groups: Sequence[list[Item]]) -> tuple[int, int, float]:
        """Input tokens (counted here, 4 characters a token, plus a half for safety),
        output tokens at most (``max_tokens``), and what that costs at batch prices."""
        chars = sum(len(json.dumps(self.classifier.messages(g))) for g in groups)
        tokens_in = int(chars / 4 * 1.5) + 1
        tokens_out = sum(self._max_tokens(len(g)) for g in groups)
        cost = self.settings.cost({"prompt_tokens": tokens_in, "completion_tokens": tokens_out})
        return tokens_in, tokens_out, cost

    def _on_signal(self) -> None:
        self.echo(
            stopping_line("the batches at the provider stay there and the next run collects them")
        )
        self.summary.interrupted = True
        self.request_stop()

    # -- the job ---------------------------------------------------------------------------
    async def _schedule(self, batches: list[list[Item]]) -> None:
        refuse_hard_links(self.path)
        ledger = Ledger(ledger_path(self.path))
        ledger.open()
        try:
            self._check_ledger(ledger)
            await self._until_stopped(self._run_chunks(ledger, batches))
        finally:
            ledger.close()

    async def _until_stopped(self, job: Coroutine[Any, Any, None]) -> None:
        """Run ``job``; once a stop is asked, give it ``STOP_GRACE`` seconds to reach its
        next look at the stop, then cut it: a call to the provider that hangs (a network
        that drops packets) must not hold a Ctrl-C for minutes. Cutting it is safe: the
        ledger says what was asked and made, and the next run looks before it asks again,
        as after a kill."""
        work = asyncio.ensure_future(job)
        stop = asyncio.ensure_future(self._stop_asked.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                await asyncio.wait({work}, timeout=STOP_GRACE)
            if not work.done():
                self.echo(
                    "batch-api: a call to the provider did not answer; cut. What is at "
                    "the provider stays there: the next run collects it."
                )
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work
                return
            work.result()  # (its exception, if it raised)
        finally:
            stop.cancel()
            if not work.done():  # (we were cancelled ourselves)
                work.cancel()

    def _check_ledger(self, ledger: Ledger) -> None:
        """Say what is damaged; refuse to collect chunks asked by another job (model,
        labels, prompt) unless the change is accepted."""
        if ledger.corrupt or ledger.lost:
            lost = sorted(ledger.lost)
            said = f"; chunk(s) {', '.join(lost[:5])} lost what they asked" if lost else ""
            self.echo(
                f"warning: {plural(ledger.corrupt, 'damaged line')} in {ledger.path} "
                f"skipped{said}: items not answered are asked again (those of a lost chunk "
                "may be paid twice)"
            )
        name = checkpoint_file(self.path).name  # (a link's target: whose ledger this is)
        if ledger.checkpoint and ledger.checkpoint != name:
            raise ConfigError(
                f"{ledger.path} is the ledger of the checkpoint {ledger.checkpoint}, not of "
                f"{name} (copied or renamed?): give each its own, or rename them back "
                "together"
            )
        running = [c for c in ledger.chunks.values() if c.ended is None]
        asked = [c.asked or ledger.job for c in running]
        other = next((a for a in asked if a is not None and a != self.job), None)
        if other is not None:
            changes = job_changes(other, self.job or {})
            if not self.settings.accept_changed:
                raise ConfigError(
                    f"{ledger.path}: {plural(len(running), 'chunk')} still at the provider "
                    f"were asked with {changes}: run with the same options to collect them, "
                    "or --accept-changed to take their answers for this job's"
                )
            self.echo(f"--accept-changed: collecting the chunks asked with {changes}")
        if ledger.job != self.job or ledger.checkpoint != name:
            ledger.set_job(self.job, name)

    async def _run_chunks(self, ledger: Ledger, batches: list[list[Item]]) -> None:
        s, o = self.settings, self.options
        running = [c for c in ledger.chunks.values() if c.ended is None]
        if s.max_spend_total is not None:  # what failed lines of earlier runs cost
            self.summary.spent_before += sum(
                s.cost(c.usage_failed) for c in ledger.chunks.values() if c.ended
            )
        at_provider = {i for c in running for i in c.ids}
        todo = [item for batch in batches for item in batch if item.id not in at_provider]
        size = s.batch_size
        waiting = [(todo[i : i + size], 1) for i in range(0, len(todo), size)]
        if running:
            self.echo(f"batch-api: {plural(len(running), 'chunk')} from an earlier run "
                      f"({plural(len(at_provider), 'item')}) picked up")  # fmt: skip
        if waiting:
            tokens_in, tokens_out, worst = self._worst_cost([g for g, _ in waiting])
            priced = f"; at most {worst:.4f} at batch prices" if s.price_in or s.price_out else ""
            self.echo(
                f"batch-api: {plural(len(todo), 'item')} in "
                f"{plural(len(waiting), 'request')}: about {tokens_in:,} input tokens "
                f"(counted here), at most {tokens_out:,} output tokens{priced}"
            )
        for chunk in running:
            if s.capped:  # what it may still cost counts against the caps, as a new one's
                self._hold(chunk)
            await self._submit(ledger, chunk)
        interval = o.poll_seconds
        while not self._stopping:
            left = sum(len(g) for g, _ in waiting)
            if waiting and left < o.finish_sync_below and not running:
                await self._finish_sync([g for g, _ in waiting])  # the end: synchronously
                waiting.clear()
                break
            while waiting and not self._stopping and left >= o.finish_sync_below:
                groups, attempt = self._cut(waiting)
                if s.capped:
                    worst = self._worst_cost(groups)[2]
                    if self.summary.spent + self._reserved + worst > self._cap():
                        self.summary.stopped_by = "spend cap"
                        waiting.clear()
                        break
                chunk = Chunk(
                    ledger.next_name(), [[i.id for i in g] for g in groups],
                    [[self._hash(i) for i in g] for g in groups], attempt, time.time(),
                    self._run_id,
                )  # fmt: skip
                if s.capped:
                    self._hold(chunk)
                ledger.add(chunk)
                killpoint("intent")
                await self._submit(ledger, chunk)
                running.append(chunk)
            if not running:
                break
            changed = said = False
            for chunk in list(running):
                if chunk.batch_id is None:  # its batch could not be told yet: look again
                    await self._submit(ledger, chunk)
                    if chunk.batch_id is None:
                        continue
                state = await self.provider.state(chunk.batch_id)
                killpoint("polled")
                if state.ended:
                    retry = await self._collect(ledger, chunk, state)
                    waiting += retry
                    running.remove(chunk)
                    self._reserved -= self._held.pop(chunk.name, 0.0)  # now spent, or not
                    changed = True
                said = self._tell(chunk.name, state) or said
            if said:
                self._status_line()
            if not running or (changed and waiting):  # new work: submit it (or finish) now
                interval = o.poll_seconds
                continue
            interval = o.poll_seconds if changed else min(o.poll_max, interval * 1.5)
            await self._pause(interval)
        if running:
            self.echo(
                f"batch-api: {plural(len(running), 'chunk')} still at the provider "
                f"({plural(sum(len(c.ids) for c in running), 'item')}): run the same command "
                "again to collect them (they are not submitted again)"
            )

    def _hold(self, chunk: Chunk) -> None:
        """Reserve what ``chunk`` may cost at most (under a spend cap) until it ends."""
        groups = [[self._by_id[i] for i in g if i in self._by_id] for g in chunk.groups]
        self._held[chunk.name] = worst = self._worst_cost([g for g in groups if g])[2]
        self._reserved += worst

    async def _finish_sync(self, groups: list[list[Item]]) -> None:
        """Ask ``groups`` as a synchronous run would (its retries, at full price)."""
        self.echo(f"batch-api: {plural(sum(map(len, groups)), 'item')} left, fewer than "
                  f"--finish-sync-below {self.options.finish_sync_below}: asked "
                  "synchronously, at full price")  # fmt: skip
        batch_prices_, self.settings = self.settings, self._full_prices
        if self.options.discount > 0:  # what a request cost so far, at the prices now paid
            self._batch_cost /= self.options.discount
        try:
            await BatchRunner._schedule(self, groups)
        finally:
            self.settings = batch_prices_

    def _cut(self, waiting: list[tuple[list[Item], int]]) -> tuple[list[list[Item]], int]:
        """The next chunk's requests from ``waiting``, of one attempt, under the limits."""
        o = self.options
        attempt = waiting[0][1]
        groups: list[list[Item]] = []
        size = 0
        while waiting and waiting[0][1] == attempt and len(groups) < o.chunk_requests:
            group = waiting[0][0]
            request = self._request("j" + "0" * 16, [i.id for i in group], group)
            line = len(orjson.dumps(request)) + 1  # (and its newline)
            if groups and size + line > o.chunk_bytes:
                break
            groups.append(waiting.pop(0)[0])
            size += line
        return groups, attempt

    async def _pause(self, seconds: float) -> None:
        stop = asyncio.ensure_future(self._stop_asked.wait())
        try:
            await asyncio.wait({stop}, timeout=seconds)
        finally:
            stop.cancel()

    def _tell(self, name: str, state: BatchState) -> bool:
        """Say how chunk ``name`` stands if that changed; whether it did."""
        said = f"{state.status} {state.completed}/{state.total}"
        self._status[name] = state.status
        if said == self._told.get(name):
            return False
        self._told[name] = said
        failed = f", {state.failed} failed" if state.failed else ""
        self.echo(f"batch-api: chunk {name}: {state.status}, "
                  f"{state.completed}/{state.total} requests done{failed}")  # fmt: skip
        return True

    def _status_line(self) -> None:
        """The job at a glance: its chunks by status, items answered, tokens, spend."""
        by_status: dict[str, int] = {}
        for status in self._status.values():
            by_status[status] = by_status.get(status, 0) + 1
        chunks = ", ".join(f"{n} {status}" for status, n in sorted(by_status.items()))
        u, s = self.summary.usage, self.summary
        priced = f"; spent {s.spent:.4f} at batch prices" if self.settings.price_in or \
            self.settings.price_out else ""  # fmt: skip
        self.echo(
            f"batch-api: {plural(len(self._status), 'chunk')} ({chunks}); "
            f"{plural(s.items_ok, 'item')} answered by this run; tokens in "
            f"{u.get('prompt_tokens', 0):,}, out {u.get('completion_tokens', 0):,}{priced}"
        )

    # -- one chunk -------------------------------------------------------------------------
    async def _submit(self, ledger: Ledger, chunk: Chunk) -> None:
        """Give ``chunk`` a batch at the provider (and first a file, if the provider takes
        one): found there if a run killed before it wrote their ids made them, made
        otherwise; each id written at once. A batch that may be the chunk's but cannot
        be told yet leaves the chunk without one: ``_run_chunks`` asks again later."""
        if self.provider.uses_files and chunk.file_id is None:
            found = await self.provider.find_file(chunk.filename, chunk.at)
            if found is None:
                requests = self._requests_of(ledger.job_id, chunk)
                data = b"".join(orjson.dumps(r) + b"\n" for r in requests)
                try:
                    found = await self.provider.upload(chunk.filename, data)
                except EndpointError:  # (its file never taken: no batch was made of it)
                    self._refused(ledger, chunk)
                    raise
                killpoint("uploaded")
            else:
                self.echo(f"batch-api: chunk {chunk.name}: its file, uploaded by a run "
                          f"stopped before it wrote the id, found ({found})")  # fmt: skip
            ledger.write({"chunk": chunk.name, "file": found})
            chunk.file_id = found
            killpoint("file")
        if chunk.batch_id is None:
            await self._make_batch(ledger, chunk)

    def _refused(self, ledger: Ledger, chunk: Chunk) -> None:
        """The provider did not take ``chunk``'s file, or refused the first try to make
        its batch (a 4xx: too large, a bad request, a wrong key): no batch of it exists
        (a file's id is written before its batch is made), so it ends here, and its items
        are asked again by the next run, in a new chunk (or by a synchronous run, which a
        chunk still running would refuse)."""
        ledger.write({"chunk": chunk.name, "ended": "refused", "failed": 0})
        chunk.ended = "refused"

    async def _make_batch(self, ledger: Ledger, chunk: Chunk) -> None:
        """The batch step of ``_submit``: look for one first where one may exist (a chunk
        of an earlier run, or one whose making failed half-way), make it otherwise."""
        job = ledger.job_id
        metadata = {"crashsafe_job": job, "crashsafe_chunk": chunk.name}
        ids = [custom_id(job, group) for group in chunk.groups]  # as asked: its intent
        lost_at: float | None = None  # when a create's answer was lost (it may be made)
        for attempt in range(12):
            looked: str | Pending | None = None
            if chunk.run != self._run_id or chunk.name in self._looked:
                known = {c.batch_id for c in ledger.chunks.values() if c.batch_id}
                looked = await self.provider.find_batch(
                    metadata, chunk.at, ids, known, least=min(self._sent(chunk), len(ids))
                )
            if isinstance(looked, Pending):
                if self._told.get(chunk.name) != "pending":
                    self._told[chunk.name] = "pending"
                    self.echo(f"batch-api: chunk {chunk.name}: a batch made since it was "
                              "written may be its own; waiting for it to end to tell")  # fmt: skip
                return
            how = "submitted"
            if looked is not None:
                batch = looked
                how = "found at the provider (made by a run stopped before it wrote the id)"
            elif lost_at is not None and time.monotonic() - lost_at < LIST_SETTLES:
                # A provider's list may show a batch a moment after it is made: look again
                # before making it twice.
                delay = min(60.0, 2.0**attempt) * random.uniform(0.5, 1.5)
                self.echo(f"batch-api: chunk {chunk.name}: not in the provider's list yet "
                          f"(it may lag); looking again in {delay:.1f} s")  # fmt: skip
                await asyncio.sleep(delay)
                continue
            else:
                # Never made before, if this run wrote its intent and never tried to make
                # it (a refusal of this create then proves there is no batch of it).
                fresh = chunk.run == self._run_id and chunk.name not in self._looked
                self._looked.add(chunk.name)  # from here on, a batch of it may exist
                # (a provider that took a file has them; one that did not takes them now)
                requests = [] if self.provider.uses_files else self._requests_of(job, chunk)
                try:
                    batch = await self.provider.create(chunk.file_id, requests, metadata)
                except MaybeMade as exc:
                    lost_at = time.monotonic() if lost_at is None else lost_at
                    delay = min(60.0, 2.0**attempt) * random.uniform(0.5, 1.5)
                    self.echo(f"{exc}; looking for it before making it again, in "
                              f"{delay:.1f} s")  # fmt: skip
                    await asyncio.sleep(delay)
                    continue
                except EndpointError:  # a 4xx: not made (MaybeMade says when it may be)
                    if fresh:  # (else an earlier try may have made one the list lacks)
                        self._refused(ledger, chunk)
                    raise
                killpoint("created")
            ledger.write({"chunk": chunk.name, "batch": batch})
            chunk.batch_id = batch
            killpoint("batch")
            self.echo(f"batch-api: chunk {chunk.name} {how} "
                      f"({plural(self._sent(chunk), 'request')}, batch {batch})")  # fmt: skip
            return
        raise EndpointError(f"{self.provider.name}: could not make a batch for chunk "
                            f"{chunk.name} in 12 tries: run the same command again")  # fmt: skip

    async def _collect(
        self, ledger: Ledger, chunk: Chunk, state: BatchState
    ) -> list[tuple[list[Item], int]]:
        """Append the answers of an ended chunk to the checkpoint; the requests to ask
        again (or dead-letter); then mark the chunk ended."""
        answers = await self.provider.answers(state)
        retry: list[tuple[list[Item], int]] = []
        fresh: list[Item] = []  # items whose text changed since asked: asked anew
        failed_usage: Usage = {}
        failed = 0
        for ids, hashes in zip(chunk.groups, chunk.hashes, strict=True):
            keep = [
                n for n, i in enumerate(ids)
                if i in self._by_id and i not in self._answered
            ]  # fmt: skip
            fresh += [self._by_id[ids[n]] for n in keep
                      if self._hash(self._by_id[ids[n]]) != hashes[n]]  # fmt: skip
            keep = [n for n in keep if self._hash(self._by_id[ids[n]]) == hashes[n]]
            if not keep:
                continue  # written before a kill, gone from the input, or changed since
            items = [self._by_id[ids[n]] for n in keep]
            usage: Usage = {}
            error, results = self._read_answer(answers.get(custom_id(ledger.job_id, ids)),
                                               items, usage, state)  # fmt: skip
            if results is not None:
                kept = [ids[n] for n in keep], [hashes[n] for n in keep]
                error = await self._write_answer(chunk, *kept, results, usage)
                if not error:
                    killpoint("answer")
                    continue
            failed += 1
            self._account(usage)
            if chunk.attempt < self.settings.max_attempts:
                add_usage(failed_usage, usage)  # the dead letter holds the others' cost
                retry.append((items, chunk.attempt + 1))
            else:
                self._dead_letter([i.id for i in items], error, chunk.attempt, usage)
                self.summary.batches_failed += 1
                self.echo(f"batch-api: request of {plural(len(items), 'item')} FAILED after "
                          f"{plural(chunk.attempt, 'attempt')}: {error}")  # fmt: skip
        ledger.write({"chunk": chunk.name, "ended": state.status, "failed": failed,
                      "usage_failed": failed_usage, "at": time.time()})  # fmt: skip
        chunk.ended = state.status
        if retry:
            why = f" ({state.errors})" if state.errors else ""
            self.echo(f"batch-api: chunk {chunk.name} {state.status}{why}: "
                      f"{plural(len(retry), 'request')} to ask again")  # fmt: skip
        if fresh:
            self.echo(f"batch-api: chunk {chunk.name}: {plural(len(fresh), 'item')} changed "
                      "since asked: asked again")  # fmt: skip
            size = self.settings.batch_size
            retry += [(fresh[i : i + size], 1) for i in range(0, len(fresh), size)]
        return retry

    def _read_answer(
        self, answer: Answer | None, items: list[Item], usage: Usage, state: BatchState
    ) -> tuple[str, list[Any] | None]:
        """(why it failed, None) or ("", the results) of one request."""
        if answer is None:
            why = f": {state.errors}" if state.errors else ""
            return f"no answer in the {state.status} batch{why}", None
        add_usage(usage, answer.usage or {})
        if answer.text is None:
            return answer.error, None
        try:
            results = list(self.classifier.answers(answer.text, items))
        except ValueError as exc:
            return f"invalid output: {exc}", None
        except Exception as exc:  # the task's own bug: this request fails, not the run
            return f"the task's answers() raised {type(exc).__name__}: {exc}", None
        if len(results) != len(items):
            return f"the task's answers() gave {len(results)} results for {len(items)} items", None
        return "", results

    async def _write_answer(self, chunk: Chunk, ids: list[str], hashes: list[str],
                            results: list[Any], usage: Usage) -> str:  # fmt: skip
        """Append one request's answers; why they cannot be (not JSON), or ""."""
        line = {"batch": chunk.name, "ids": ids, "hashes": hashes, "results": results,
                "usage": usage, "attempts": chunk.attempt, "via": "batch-api",
                "provider_batch": chunk.batch_id, "finished_at": _now_iso(),
                "input_items": len(self.inputs.items)}  # fmt: skip
        if self.settings.price_in or self.settings.price_out:
            line["cost"] = round(self.settings.cost(usage), 9)
            line["priced"] = f"batch ({self.options.discount:.0%} of the given prices)"
        if self.tracer is not None:  # one span per request answered through the Batch API
            with self.tracer.start_as_current_span("batch.answer", attributes={
                "crashsafe.batch": chunk.name, "crashsafe.items": len(ids),
                "crashsafe.provider_batch": chunk.batch_id or "",
                "gen_ai.usage.input_tokens": usage.get("prompt_tokens", 0),
                "gen_ai.usage.output_tokens": usage.get("completion_tokens", 0),
                "crashsafe.cost": self.settings.cost(usage),
            }):  # fmt: skip
                pass
        try:
            encoded = encode_line(line)
        except (TypeError, ValueError) as exc:
            return f"results are not JSON: {exc}"
        await self._write(encoded)
        self._answered.update(ids)
        self._account(usage)
        self.summary.batches_ok += 1
        self.summary.items_ok += len(ids)
        return ""
