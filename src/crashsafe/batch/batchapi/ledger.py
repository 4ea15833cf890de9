"""The submission ledger: what was asked of a provider's Batch API, written before it is
asked, and what the provider answered, written as soon as it answers.

``results.jsonl`` -> ``results.batches.jsonl``, beside the checkpoint, append-only and
fsync'd like it (and under its lock: one run at a time). Lines:

- ``{"job_id": "j..."}``: first, once. The job's id at the provider (every request's
  ``custom_id`` and every batch's metadata carry it), random, kept for good;
- ``{"chunk": "c000001", "intent": {"groups": [[ids]], "hashes": [[...]], "attempt": 1},
  "at": <unix time>}``: before the chunk's file is uploaded;
- ``{"chunk": ..., "file": "file-..."}``: once the upload answered;
- ``{"chunk": ..., "batch": "batch_..."}``: once the batch was created;
- ``{"chunk": ..., "ended": "completed|expired|cancelled|failed", "failed": N,
  "usage_failed": {...}}``: once its results are in the checkpoint.

A run killed between two of these finds, for each chunk not ended, how far it got, and
asks the provider for the rest (its files by name, its batches by metadata) before doing
anything again: a chunk that has a batch never gets a second one.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from crashsafe.errors import StoreError
from crashsafe.files import open_private


def ledger_path(checkpoint: Path) -> Path:
    """``results.jsonl`` -> ``results.batches.jsonl``."""
    return checkpoint.with_name(checkpoint.stem + ".batches" + (checkpoint.suffix or ".jsonl"))


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
    file_id: str | None = None
    batch_id: str | None = None
    ended: str | None = None
    usage_failed: dict[str, int] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}.jsonl"

    @property
    def ids(self) -> list[str]:
        return [i for group in self.groups for i in group]


class Ledger:
    """An open ledger (the checkpoint's lock must be held)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.job_id = ""
        self.chunks: dict[str, Chunk] = {}
        self.corrupt = 0
        self._fd: int | None = None

    def open(self) -> None:
        self._fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, follow=False)
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep < len(data):  # a torn last line: its step was never done
            os.ftruncate(self._fd, keep)
            os.fsync(self._fd)
        for raw in data[:keep].split(b"\n"):
            if raw.strip():
                self._read(raw)
        if not self.job_id:
            self.job_id = "j" + secrets.token_hex(8)
            self.write({"job_id": self.job_id, "at": time.time()})

    def _read(self, raw: bytes) -> None:
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self.corrupt += 1
            return
        if not isinstance(line, dict):
            self.corrupt += 1
            return
        if isinstance(line.get("job_id"), str) and not self.job_id:
            self.job_id = line["job_id"]
            return
        name = line.get("chunk")
        if not isinstance(name, str):
            self.corrupt += 1
            return
        intent = line.get("intent")
        if isinstance(intent, dict):
            self.chunks[name] = Chunk(
                name, intent["groups"], intent["hashes"], int(intent.get("attempt", 1)),
                float(line.get("at", 0)), str(intent.get("run", "")),
            )  # fmt: skip
            return
        chunk = self.chunks.get(name)
        if chunk is None:
            self.corrupt += 1
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
        return f"c{len(self.chunks) + 1:06d}"

    def write(self, line: dict[str, Any]) -> None:
        """Append ``line`` durably (one write, fsync) before going on."""
        assert self._fd is not None, "ledger is not open"
        data = orjson.dumps(line) + b"\n"
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as exc:
            raise StoreError(f"cannot append to {self.path}: {exc.strerror or exc}") from None

    def add(self, chunk: Chunk) -> None:
        intent = {"groups": chunk.groups, "hashes": chunk.hashes, "attempt": chunk.attempt,
                  "run": chunk.run}  # fmt: skip
        self.write({"chunk": chunk.name, "intent": intent, "at": chunk.at})
        self.chunks[chunk.name] = chunk

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
