"""The classification prompt: what ``llm.py`` sends and ``testserver.py`` understands."""

from __future__ import annotations

import re
from collections.abc import Sequence

from crashsafe.batch.items import Item

_LABELS = re.compile(r"^Labels: (.+)$", re.MULTILINE)
_ITEM = re.compile(r"^\[([^\]]+)\] (.*)$", re.MULTILINE)


def system_prompt(labels: Sequence[str]) -> str:
    return (
        "You classify short texts.\n"
        f"Labels: {', '.join(labels)}\n"
        'Reply with only a JSON object {"labels": [{"id": "<id>", "label": "<label>"}]} '
        "holding exactly one entry per text, with the text's id and one of the labels."
    )


def user_prompt(items: Sequence[Item]) -> str:
    return "\n".join(f"[{item.id}] {' '.join(item.text.split())}" for item in items)


def parse_labels(system: str) -> list[str]:
    found = _LABELS.search(system)
    return [p.strip() for p in found.group(1).split(",")] if found else []


def parse_items(user: str) -> list[tuple[str, str]]:
    return _ITEM.findall(user)
