"""The JSON Lines checkpoint: append-only, one line per finished batch, fsync'd.

A line is written whole with one ``write`` and made durable with ``flush`` + ``fsync``
before the batch counts as done; the file is never rewritten. Reading is tolerant: a torn
last line (the process died mid-write) is cut, with a warning, and its items are done
again; a whole last line whose newline was never written is kept, the newline added; a
corrupt line elsewhere is skipped with a warning and its items are simply done again.

Two kinds of line:

- a batch: ``{"ids": [...], "results": [...], "hashes": [...], "usage": {...},
  "cost": ..., "input_items": N}``: ``hashes`` (one per id, :func:`text_hash` of what was
  asked) tell a rerun which items changed since they were answered; lines written before
  they existed have none, and their answers are kept; ``input_items`` is how many items
  the run's input held (the console's done/total and ETA);
- a job: ``{"job": {"task", "labels", "model", "prompt"}}``, written when a job first
  opens the checkpoint (and again when a rerun accepts a change): what the answers after
  it depend on, so that a rerun with other labels, model or prompt is refused instead of
  mixing answers.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from crashsafe.collector import paused_gc
from crashsafe.errors import ConfigError, StoreError, WorkerBusyError
from crashsafe.files import open_private

CORRUPT_SHOWN = 5  # corrupt line numbers kept for messages


@dataclass(slots=True)
class CheckpointScan:
    """What a checkpoint holds. ``lines`` are the valid ones, in file order."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)  # the job lines' "job", in order
    corrupt: int = 0
    corrupt_at: list[int] = field(default_factory=list)  # line numbers of the first few
    torn_bytes: int = 0  # an unfinished last line (a write cut short): its length
    unterminated: bool = False  # the last line is whole, but its newline was never written
    ledger_lines: int = 0  # lines of a Batch API ledger (given as a checkpoint by mistake?)

    def corrupt_where(self) -> str:
        """``"line 3, 7"``, for messages (the first few)."""
        more = ", ..." if self.corrupt > len(self.corrupt_at) else ""
        plural = "s" if len(self.corrupt_at) > 1 else ""
        return f"line{plural} {', '.join(map(str, self.corrupt_at))}{more}"

    def done_ids(self) -> set[str]:
        return {i for line in self.lines for i in line.get("ids", [])}

    def answered(self) -> dict[str, str | None]:
        """Every answered id and the hash of the text it was answered for (None: written
        before hashes were; the last line of an id wins, as in the report)."""
        done: dict[str, str | None] = {}
        for line in self.lines:
            hashes = line.get("hashes")
            if isinstance(hashes, list) and len(hashes) == len(line["ids"]):
                done.update(zip(line["ids"], hashes, strict=True))
            else:
                done.update(dict.fromkeys(line["ids"]))
        return done

    def costs(self, cost: Callable[[dict[str, Any]], float]) -> list[float]:
        """What each batch written cost: its line's ``cost``, else ``cost(usage)`` (a line
        written before lines had one)."""
        found = []
        for line in self.lines:
            recorded = line.get("cost")
            if isinstance(recorded, int | float) and not isinstance(recorded, bool):
                found.append(float(recorded))
            else:
                found.append(cost(line.get("usage") or {}))
        return found


def text_hash(text: str, rest: dict[str, Any] | None = None) -> str:
    """16 hex characters of SHA-256 of what an answer was given for: ``text``
    normalised as ids are (whitespace collapsed, lower-cased: a file saved again with
    CRLF, or a duplicate folded under another spelling, is no change), and, for a task
    that sees the whole row, the row's other fields (``rest``)."""
    normalised = _WHITESPACE.sub(" ", text).strip().lower()
    if rest:
        normalised += "\x00" + json.dumps(rest, sort_keys=True, default=str)
    return hashlib.sha256(normalised.encode("utf-8", "surrogatepass")).hexdigest()[:16]


_WHITESPACE = re.compile(r"\s+")


def encode_line(line: dict[str, Any]) -> str:
    """One checkpoint line. Raises ValueError/TypeError for what the reader could not give
    back as written (NaN, infinities, objects, integers beyond 64 bits, which orjson reads
    as floats), so such a result fails its batch instead of being stored wrong."""
    text = json.dumps(line, ensure_ascii=False, allow_nan=False)
    if _has_big_int(line):
        raise ValueError("integers beyond 64 bits cannot be stored exactly: return strings")
    return text


def _has_big_int(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return not -(2**63) <= value < 2**64
    if isinstance(value, dict):
        return any(_has_big_int(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_big_int(v) for v in value)
    return False


def _valid(line: Any) -> bool:
    """The right shape and the right types: a line ``{"ids": [["x"]], ...}`` is as
    corrupt as one that does not parse."""
    return (
        isinstance(line, dict)
        and isinstance(line.get("ids"), list)
        and isinstance(line.get("results"), list)
        and len(line["ids"]) == len(line["results"])
        and all(isinstance(i, str) for i in line["ids"])
        and isinstance(line.get("usage", {}), dict)
    )


def whole_line(tail: bytes) -> bool:
    """Whether ``tail``, the bytes after a file's last newline, is a whole JSON object (a
    line whose newline a kill or a full disk kept from being written): JSON cut short
    never parses as one."""
    try:
        return isinstance(orjson.loads(tail), dict)
    except orjson.JSONDecodeError:
        return False


def scan(path: Path) -> CheckpointScan:
    """Read every valid line of the checkpoint at ``path`` (missing file: empty)."""
    with paused_gc():
        return _scan(path)


def _scan(path: Path) -> CheckpointScan:
    result = CheckpointScan()
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return result
    chunks = data.split(b"\n")
    if chunks[-1]:  # no newline at the end: the last write was cut short...
        if whole_line(chunks[-1]):  # ...after the line itself: it is kept
            result.unterminated = True
            chunks.append(b"")
        else:
            result.torn_bytes = len(chunks[-1])
    for number, chunk in enumerate(chunks[:-1], 1):
        if not chunk.strip():
            continue
        try:
            line = orjson.loads(chunk)
        except orjson.JSONDecodeError:
            line = None
        if _valid(line):
            result.lines.append(line)
        elif isinstance(line, dict) and ("job_id" in line or "chunk" in line):
            result.ledger_lines += 1  # (a Batch API ledger's: see batchapi/ledger.py)
        elif isinstance(line, dict) and isinstance(line.get("job"), dict) and "ids" not in line:
            result.jobs.append(line["job"])
        else:
            result.corrupt += 1
            if len(result.corrupt_at) < CORRUPT_SHOWN:
                result.corrupt_at.append(number)
    return result


class Checkpoint:
    """An open checkpoint, locked against a second run for as long as it is open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_path = path.with_name(path.name + ".lock")
        self._lock_fd: int | None = None
        self._fd: int | None = None
        self.found = CheckpointScan()  # what open() read

    def __enter__(self) -> Checkpoint:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> CheckpointScan:
        """Take the lock, read what is there, make the file ready for appending.

        The lock is an ``flock`` on the checkpoint file itself, so it follows the file,
        not its name: a second run through a symbolic or a hard link to it is refused
        like one through the same path. ``<checkpoint>.lock`` only says who holds it.
        """
        if not self.path.parent.is_dir():
            raise ConfigError(f"cannot write checkpoint {self.path}: no folder {self.path.parent}")
        fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise WorkerBusyError(
                f"checkpoint {self.path} is in use by {self._holder()}: wait for it to "
                "finish or stop it, or use another --checkpoint"
            ) from None
        self._fd = fd
        try:
            lock_fd = open_private(self._lock_path, os.O_RDWR | os.O_CREAT, follow=False)
            os.ftruncate(lock_fd, 0)
            os.write(lock_fd, f"pid {os.getpid()}".encode())
            self._lock_fd = lock_fd
            found = self.found = scan(self.path)
            if found.ledger_lines and not found.lines:
                raise ConfigError(
                    f"{self.path} is the ledger of a Batch API job, not a checkpoint: give "
                    "the job's checkpoint (its name without .batches)"
                )
            if found.unterminated:  # (else the next line would be glued to it)
                self._write_durably(b"\n")
            elif found.torn_bytes:
                self._repair_torn_tail()
        except BaseException:
            self.close()
            raise
        return found

    def _holder(self) -> str:
        try:
            fd = open_private(self._lock_path, os.O_RDONLY, follow=False)
        except (OSError, ConfigError):
            return "another process"
        try:
            return os.read(fd, 64).decode(errors="replace").strip() or "another process"
        finally:
            os.close(fd)

    def _repair_torn_tail(self) -> None:
        """Cut the last, unfinished line (a kill or a full disk mid-write): its batch was
        never done, so nothing is lost, and the file reads clean again instead of keeping
        a corrupt line forever. Only bytes after the last newline are ever removed."""
        assert self._fd is not None
        data = self.path.read_bytes()
        keep = data.rfind(b"\n") + 1
        os.ftruncate(self._fd, keep)
        os.fsync(self._fd)

    def _write_durably(self, data: bytes) -> None:
        assert self._fd is not None, "checkpoint is not open"
        view = memoryview(data)
        try:
            while view:  # os.write may write less than asked (e.g. on a signal)
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StoreError(
                    f"disk full while appending to {self.path}: free some space and run "
                    "the same command again (the batches in flight are done again; a line "
                    "cut short is repaired then)"
                ) from None
            raise StoreError(f"cannot append to {self.path}: {exc.strerror or exc}") from None

    def append(self, lines: Sequence[dict[str, Any]]) -> None:
        """Append ``lines`` with one write and one fsync (group commit)."""
        self.append_encoded([encode_line(line) for line in lines])

    def append_encoded(self, lines: Sequence[str]) -> None:
        """Append lines already made by :func:`encode_line`: one write, one fsync."""
        if lines:
            self._write_durably("".join(line + "\n" for line in lines).encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            # The lock file stays: unlinking it would let two runs lock two different files.
            os.close(self._lock_fd)
            self._lock_fd = None


def iter_rows(paths: Sequence[Path]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """Every (id, result, line) of several checkpoints, in order."""
    for path in paths:
        for line in scan(path).lines:
            for item_id, result in zip(line["ids"], line["results"], strict=True):
                yield item_id, result, line


def dead_letter_path(checkpoint: Path) -> Path:
    """``results.jsonl`` → ``results.failed.jsonl``."""
    return checkpoint.with_name(checkpoint.stem + ".failed" + (checkpoint.suffix or ".jsonl"))


def dead_lines(path: Path) -> list[dict[str, Any]]:
    """Dead-letter lines of a checkpoint (they have ids and an error, no results)."""
    lines: list[dict[str, Any]] = []
    try:
        # Undecodable bytes (a line torn mid-character, a file edited by hand) are
        # replaced: such a line fails to parse and is skipped like any corrupt line.
        text = dead_letter_path(path).read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        return lines
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        # Wrong types (ids that are not strings, usage that is not an object) are as
        # corrupt as a line that does not parse: skipped, never a crash of the report.
        if (
            isinstance(line, dict)
            and isinstance(line.get("ids"), list)
            and all(isinstance(i, str) for i in line["ids"])
            and isinstance(line.get("usage", {}), dict)
        ):
            lines.append(line)
    return lines
