"""The submission ledger: what was asked of a provider's Batch API, written before it is
asked, and what the provider answered, written as soon as it answers.

``results.jsonl`` -> ``results.batches.jsonl``, beside the checkpoint, append-only and
fsync'd like it, and locked while a run has it open (one run at a time, even for two
checkpoints that map to one ledger). Lines:

- ``{"job_id": "j...", "job": {...}, "checkpoint": "results.jsonl"}``: first. The job's
  id at the provider (every request's ``custom_id``, every file's name and every batch's
  metadata carry it), random, kept for good; what the job asks (task, labels, model),
  written again when a run accepts a change (``--accept-changed``); the checkpoint's name
  (a ledger copied beside another checkpoint is refused);
- ``{"chunk": "c000001", "intent": {"job": "j...", "asked": {...}, "groups": [[ids]],
  "hashes": [[...]], "attempt": 1}, "at": <unix time>}``: before the chunk's file is
  uploaded (the job id and what was asked again, for a damaged first line);
- ``{"chunk": ..., "file": "file-..."}``: once the upload answered;
- ``{"chunk": ..., "batch": "batch_..."}``: once the batch was created;
- ``{"chunk": ..., "ended": "completed|expired|cancelled|failed|refused", "failed": N,
  "usage_failed": {...}}``: once its results are in the checkpoint.

A run killed between two of these finds, for each chunk not ended, how far it got, and
asks the provider for the rest (its files by name, its batches by metadata) before doing
anything again: a chunk that has a batch never gets a second one.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import orjson

from crashsafe.batch.checkpoint import whole_line
from crashsafe.errors import ConfigError, StoreError
from crashsafe.files import open_private


def _beside(checkpoint: Path) -> Path:
    return checkpoint.with_name(checkpoint.stem + ".batches" + (checkpoint.suffix or ".jsonl"))


def checkpoint_file(checkpoint: Path) -> Path:
    """The file ``checkpoint`` names (a symbolic link's target, or itself)."""
    return Path(os.path.realpath(checkpoint))


def ledger_path(checkpoint: Path) -> Path:
    """``results.jsonl`` -> ``results.batches.jsonl``, beside the file the checkpoint is:
    a run through a symbolic link to it finds the same ledger (beside the link's name it
    would find none, and pay again for every chunk still at the provider)."""
    ledger = _beside(checkpoint_file(checkpoint))
    named = _beside(checkpoint.absolute())
    if (
        checkpoint.is_symlink()
        and Path(os.path.realpath(named)) != ledger
        and _belongs_to(named, checkpoint.name)
    ):
        raise ConfigError(
            f"{checkpoint} is a link to {checkpoint_file(checkpoint)}, whose ledger is "
            f"{ledger}, but {named} exists too: a ledger beside the link's name, whose "
            "chunks this run would not see; keep the one that belongs to the job (move the "
            "other aside)"
        )
    return ledger


def _belongs_to(ledger: Path, checkpoint_name: str) -> bool:
    """Whether ``ledger`` exists and its first line names ``checkpoint_name`` as its
    checkpoint (a ledger made beside a link's name, before ledgers followed links)."""
    try:
        with ledger.open("rb") as f:
            first = orjson.loads(f.readline())
    except (OSError, orjson.JSONDecodeError):
        return False
    return isinstance(first, dict) and first.get("checkpoint") == checkpoint_name


def refuse_hard_links(checkpoint: Path) -> None:
    """Refuse a checkpoint file that has other names (hard links): a run through another
    name would look for its ledger beside that name, not find this one, and pay again for
    the chunks still at the provider."""
    try:
        links = os.stat(checkpoint).st_nlink
    except OSError:  # (not there yet; what else is wrong with it is said when it opens)
        return
    if links > 1:
        raise ConfigError(
            f"{checkpoint} has {links} names (hard links): a Batch API job keeps what it "
            "sent in a ledger named after its checkpoint, which a run through another name "
            "would not find; keep one name (remove the other links, or copy the file)"
        )


@dataclass(slots=True)
class Chunk:
    """One batch at the provider: its requests (``groups``, item ids per request, with
    the hashes of the texts asked), and how far its submission and collection got."""

    name: str
    groups: list[list[str]]
    hashes: list[list[str]]
    attempt: int
    at: float
    run: str = ""
    job_id: str = ""
    asked: dict[str, Any] | None = None  # the job (task, labels, model) it was asked with
    file_id: str | None = None
    batch_id: str | None = None
    ended: str | None = None
    usage_failed: dict[str, int] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        """Its batch file's name at the provider: the job's and the chunk's (a file is
        found again by it, so two jobs must never share one)."""
        return f"{self.job_id}-{self.name}.jsonl"

    @property
    def ids(self) -> list[str]:
        return [i for group in self.groups for i in group]


class Ledger:
    """An open ledger (the checkpoint's lock must be held)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.job_id = ""
        self.job: dict[str, Any] | None = None  # what its chunks were asked with
        self.checkpoint = ""  # the name of the checkpoint it belongs to
        self.chunks: dict[str, Chunk] = {}
        self.corrupt = 0
        self.lost: set[str] = set()  # chunks seen without their intent (a damaged line)
        self._top = 0  # the highest chunk number seen, in any line
        self._fd: int | None = None

    def open(self) -> None:
        self._fd = open_private(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, follow=False)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.close()
            raise StoreError(
                f"{self.path} is in use by another run (another checkpoint's run shares this "
                "ledger): wait for it to end, or give this run a checkpoint of its own name"
            ) from None
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep < len(data) and whole_line(data[keep:]):  # whole, its newline not written
            data += b"\n"
            self._append(b"\n")
            keep = len(data)
        elif keep < len(data):  # a torn last line: its step was never done
            os.ftruncate(self._fd, keep)
            os.fsync(self._fd)
        found_ids: set[str] = set()
        for raw in data[:keep].split(b"\n"):
            if raw.strip():
                self._read(raw, found_ids)
        if self.job is None:  # the job line was damaged: the intents say what was asked
            self.job = next((c.asked for c in reversed(self.chunks.values()) if c.asked), None)
        if not self.job_id and found_ids:  # the job line was damaged: the intents say it
            if len(found_ids) > 1:
                raise StoreError(f"{self.path}: its job line is damaged and its chunks name "
                                 f"{len(found_ids)} jobs; move it aside to start anew")  # fmt: skip
            [self.job_id] = found_ids
        if not self.job_id and (self.chunks or self.lost):
            raise StoreError(
                f"{self.path}: its job line is damaged, so the batches of its "
                f"{len(self.chunks) + len(self.lost)} chunks cannot be told apart from other "
                "jobs' at the provider; move it aside to start anew (the answers already in "
                "the checkpoint are kept; what the chunks still running would answer is asked "
                "again)"
            )
        self.lost -= set(self.chunks)
        if not self.job_id:
            self.job_id = "j" + secrets.token_hex(8)

    def set_job(self, job: dict[str, Any] | None, checkpoint: str) -> None:
        """Write what the job asks and whose ledger it is (first, or after an accepted
        change)."""
        self.write({"job_id": self.job_id, "job": job, "checkpoint": checkpoint,
                    "at": time.time()})  # fmt: skip
        self.job, self.checkpoint = job, checkpoint

    def _read(self, raw: bytes, found_ids: set[str]) -> None:
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.corrupt += 1
            return
        if not isinstance(line, dict):
            self.corrupt += 1
            return
        if isinstance(line.get("job_id"), str) and "chunk" not in line:
            self.job_id = self.job_id or line["job_id"]
            job = line.get("job")
            self.job = job if isinstance(job, dict) else self.job
            checkpoint = line.get("checkpoint")
            self.checkpoint = checkpoint if isinstance(checkpoint, str) else self.checkpoint
            return
        name = line.get("chunk")
        if not isinstance(name, str):
            self.corrupt += 1
            return
        if name[1:].isdigit():
            self._top = max(self._top, int(name[1:]))
        intent = line.get("intent")
        if isinstance(intent, dict):
            chunk = _chunk_of(name, intent, line.get("at"))
            if chunk is None:
                self.corrupt += 1
                self.lost.add(name)
                return
            if chunk.job_id:
                found_ids.add(chunk.job_id)
            self.chunks[name] = chunk
            return
        chunk = self.chunks.get(name)
        if chunk is None:
            self.lost.add(name)  # its intent line is damaged: what it asked is unknown
            return
        if isinstance(line.get("file"), str):
            chunk.file_id = line["file"]
        if isinstance(line.get("batch"), str):
            chunk.batch_id = line["batch"]
        if isinstance(line.get("ended"), str):
            chunk.ended = line["ended"]
            usage = line.get("usage_failed")
            chunk.usage_failed = usage if isinstance(usage, dict) else {}

    def next_name(self) -> str:
        """A name no chunk of this ledger had, even one whose lines are damaged."""
        self._top += 1
        return f"c{self._top:06d}"

    def write(self, line: dict[str, Any]) -> None:
        """Append ``line`` durably (one write, fsync) before going on."""
        self._append(orjson.dumps(line) + b"\n")

    def _append(self, data: bytes) -> None:
        assert self._fd is not None, "ledger is not open"
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as exc:
            raise StoreError(f"cannot append to {self.path}: {exc.strerror or exc}") from None

    def add(self, chunk: Chunk) -> None:
        chunk.job_id, chunk.asked = self.job_id, self.job
        intent = {"job": self.job_id, "asked": self.job, "groups": chunk.groups,
                  "hashes": chunk.hashes, "attempt": chunk.attempt, "run": chunk.run}  # fmt: skip
        self.write({"chunk": chunk.name, "intent": intent, "at": chunk.at})
        self.chunks[chunk.name] = chunk

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _chunk_of(name: str, intent: dict[str, Any], at: Any) -> Chunk | None:
    """The chunk an intent line describes, or None if the line is not one we wrote."""
    groups, hashes = intent.get("groups"), intent.get("hashes")
    if not (_nested_strings(groups) and _nested_strings(hashes)):
        return None
    if [len(g) for g in groups] != [len(h) for h in hashes] or not groups:
        return None
    attempt = intent.get("attempt", 1)
    asked = intent.get("asked")
    return Chunk(
        name, groups, hashes, attempt if isinstance(attempt, int) and attempt > 0 else 1,
        float(at) if isinstance(at, int | float) else 0.0, str(intent.get("run", "")),
        str(intent.get("job", "")), asked if isinstance(asked, dict) else None,
    )  # fmt: skip


def _nested_strings(value: Any) -> TypeGuard[list[list[str]]]:
    return isinstance(value, list) and all(
        isinstance(g, list) and all(isinstance(i, str) for i in g) for g in value
    )
