"""An LLM task of your own: how urgently each support message needs an answer.

A ``PromptTask`` says what to ask (``system_prompt``; the items follow, one ``[id] text``
line each) and how to read the reply into one result per item (``answers``, raising
ValueError to have it asked again). crashsafe does the rest: batching, retries, the
checkpoint, spend caps, and the provider's Batch API at half the price:

    crashsafe batch llm-server --port 8811 &
    crashsafe batch run messages.jsonl --task examples/llm_task.py:Urgency \\
        --checkpoint urgency.jsonl --base-url http://127.0.0.1:8811/v1 --model test \\
        --via batch-api --poll-seconds 1
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from crashsafe.batch import PromptTask
from crashsafe.batch.items import Item

LEVELS = {"urgent": 3, "normal": 2, "later": 1}


class Urgency(PromptTask):
    name = "urgency"

    def system_prompt(self) -> str:
        return (
            "Rate how urgently each support message needs an answer.\n"
            f"Labels: {', '.join(LEVELS)}\n"
            'Reply with only a JSON object {"labels": [{"id": "<id>", "label": "<label>"}]} '
            "holding exactly one entry per message, with its id and one of the labels."
        )

    def answers(self, text: str, items: Sequence[Item]) -> list[dict[str, Any]]:
        try:
            found = {e["id"]: e["label"] for e in json.loads(text)["labels"]}
        except (ValueError, KeyError, TypeError):
            raise ValueError("not the JSON object asked for") from None
        missing = [item.id for item in items if found.get(item.id) not in LEVELS]
        if missing:
            raise ValueError(f"no level among {', '.join(LEVELS)} for {', '.join(missing[:5])}")
        return [{"urgency": found[i.id], "level": LEVELS[found[i.id]]} for i in items]
