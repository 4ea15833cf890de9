"""Batch inputs: read JSONL, CSV or plain text into items with stable ids.

An item's id is the value of ``--id-field`` when the input has one; otherwise
``stable_text_id`` of its text (whitespace collapsed, lower-cased, SHA-256), so the same
review gets the same id in every run and identical texts are processed once. With
``key_by="position"`` the id comes from file + line + text instead, to keep every
occurrence.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from crashsafe.collector import paused_gc
from crashsafe.errors import ConfigError
from crashsafe.ids import stable_text_id

KeyBy = Literal["content", "position"]


@dataclass(frozen=True, slots=True)
class Item:
    """One unit of work: ``id`` (stable), ``text``, and the whole input ``data``."""

    id: str
    text: str
    data: dict[str, Any] = field(default_factory=dict, compare=False)
    line: int = 0


@dataclass(slots=True)
class Inputs:
    """Items in input order, with duplicates (the same id and text) folded."""

    items: list[Item]
    duplicates: int = 0
    skipped_by_shard: int = 0


def _records(path: Path) -> Iterator[tuple[int, dict[str, Any] | str]]:
    suffix = path.suffix.lower()
    if suffix in {".jsonl", ".ndjson"}:
        with path.open("rb") as raw:
            for n, data in enumerate(raw, 1):
                if not data.strip():
                    continue
                try:
                    value = orjson.loads(data)  # 5x the stdlib's speed: 1M lines in ~1 s
                except orjson.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{n}: not valid JSON ({exc})") from None
                if not isinstance(value, dict):
                    raise ConfigError(f"{path}:{n}: each line must be a JSON object")
                yield n, value
        return
    try:
        with path.open(encoding="utf-8", newline="") as f:
            if suffix == ".csv":
                for n, row in enumerate(csv.DictReader(f), 2):
                    yield n, dict(row)
            else:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        yield n, line.rstrip("\n")
    except UnicodeDecodeError:
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            where = data.count(b"\n", 0, exc.start) + 1
            raise ConfigError(
                f"{path}:{where}: not UTF-8 ({exc.reason} at byte {exc.start}): convert it, "
                f"e.g. iconv -f latin1 -t utf-8 {path} > utf8{path.suffix}"
            ) from None
        raise


def in_shard(item_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether ``item_id`` belongs to shard ``k`` of ``n`` (1-based), by a hash of the id."""
    if shard is None:
        return True
    k, n = shard
    return int(hashlib.sha256(item_id.encode()).hexdigest()[:12], 16) % n == k - 1


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        k, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise ConfigError(f"--shard {text!r}: use K/N, e.g. 1/4") from None
    if not 1 <= k <= n:
        raise ConfigError(f"--shard {text!r}: need 1 <= K <= N")
    return k, n


def read_items(
    path: Path,
    *,
    id_field: str | None = "id",
    text_field: str = "text",
    key_by: KeyBy = "content",
    shard: tuple[int, int] | None = None,
) -> Inputs:
    """Read ``path`` (``.jsonl``, ``.csv``, or text: one item per line)."""
    if not path.is_file():
        raise ConfigError(f"input {path} does not exist")
    with paused_gc():
        return _read_items(path, id_field, text_field, key_by, shard)


def every_item(
    path: Path, *, id_field: str | None = "id", text_field: str = "text", key_by: KeyBy = "content"
) -> Iterator[Item]:
    """Every row of ``path`` as an item with its id, duplicates included, in file order:
    how a run keys them (``batch report --input`` joins answers back to rows so)."""
    for line, record in _records(path):
        data = {"text": record} if isinstance(record, str) else record
        if text_field not in data:
            raise ConfigError(
                f"{path}:{line}: no field {text_field!r}; choose one with --text-field "
                f"(fields here: {', '.join(map(str, data)) or 'none'})"
            )
        text = str(data[text_field])
        if key_by == "position":
            item_id = (
                "P"
                + hashlib.sha256(
                    f"{path.name}:{line}:{text}".encode("utf-8", "surrogatepass")
                ).hexdigest()[:16]
            )
        elif id_field and data.get(id_field) not in (None, ""):
            item_id = str(data[id_field])
        else:
            item_id = stable_text_id(text)
        yield Item(item_id, text, data, line)


def _read_items(
    path: Path,
    id_field: str | None,
    text_field: str,
    key_by: KeyBy,
    shard: tuple[int, int] | None,
) -> Inputs:
    # id -> its first line and a hash of its text (an id from the text names that text)
    seen: dict[str, tuple[int, int]] = {}
    result = Inputs(items=[])
    for item in every_item(path, id_field=id_field, text_field=text_field, key_by=key_by):
        value = item.data.get(text_field, item.text)
        if value is None or isinstance(value, (dict, list, bool)):
            said = "no value (a CSV row too short?)" if value is None else orjson.dumps(value)
            raise ConfigError(
                f"{path}:{item.line}: field {text_field!r} holds {str(said)[:40]}, not text; "
                "fix the input or choose another field with --text-field"
            )
        item_id = item.id
        given = bool(id_field) and item.data.get(id_field or "") not in (None, "")
        # (what the prompt sends: whitespace collapsed)
        text = hash(" ".join(item.text.split())) if given and key_by == "content" else 0
        first = seen.get(item_id)
        if first is not None:
            if first[1] != text:
                raise ConfigError(
                    f"{path}:{item.line}: id {item_id!r} again, with another text than on "
                    f"line {first[0]}: one id, one answer, so one of them would get the "
                    "other's; give each its own id, or drop one of the two rows"
                )
            result.duplicates += 1
            continue
        seen[item_id] = (item.line, text)
        if not in_shard(item_id, shard):
            result.skipped_by_shard += 1
            continue
        result.items.append(item)
    return result
