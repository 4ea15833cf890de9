"""The classification prompt: what ``llm.py`` sends and ``testserver.py`` understands."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from crashsafe.batch.items import Item

_LABELS = re.compile(r"^Labels: (.+)$", re.MULTILINE)
_ITEM = re.compile(r'^\[("(?:[^"\\\n]|\\.)*"|[^\]\n]+)\] (.*)$', re.MULTILINE)
_ODD_ID = re.compile(r'[\]\r\n]|^"')  # would end its brackets or its line, or look quoted


def system_prompt(labels: Sequence[str]) -> str:
    return (
        "You classify short texts.\n"
        f"Labels: {', '.join(labels)}\n"
        'Reply with only a JSON object {"labels": [{"id": "<id>", "label": "<label>"}]} '
        "holding exactly one entry per text, with the text's id and one of the labels."
    )


def shown_id(item_id: str) -> str:
    """An id as the prompt shows it: itself, or JSON-quoted if it holds a ``]`` or a line
    break (it would end its brackets, or its line, early: never answerable)."""
    return json.dumps(item_id, ensure_ascii=False) if _ODD_ID.search(item_id) else item_id


def user_prompt(items: Sequence[Item]) -> str:
    return "\n".join(f"[{shown_id(item.id)}] {' '.join(item.text.split())}" for item in items)


def parse_labels(system: str) -> list[str]:
    found = _LABELS.search(system)
    return [p.strip() for p in found.group(1).split(",")] if found else []


def parse_items(user: str) -> list[tuple[str, str]]:
    return [(json.loads(i) if i.startswith('"') else i, text) for i, text in _ITEM.findall(user)]
