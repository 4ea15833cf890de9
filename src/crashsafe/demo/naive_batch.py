"""The naive batch job: the anti-pattern for ``crashsafe killtest --mode batch``.

It classifies every item from the first one on each start, appending results to a JSON
Lines file as they come, with no checkpoint to skip what was done: a restart pays for
everything again and writes every result again.

    python -m crashsafe.demo.naive_batch INPUT.jsonl OUT.jsonl BASE_URL LABELS
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import openai

from crashsafe.batch.items import read_items
from crashsafe.batch.prompt import system_prompt, user_prompt


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        sys.exit("usage: python -m crashsafe.demo.naive_batch INPUT OUT BASE_URL LABELS")
    source, out, base_url, labels = args
    names = labels.split(",")
    client = openai.OpenAI(base_url=base_url, api_key="local", max_retries=5)
    items = read_items(Path(source)).items
    with open(out, "a", encoding="utf-8") as f:
        for start in range(0, len(items), 10):
            batch = items[start : start + 10]
            response = client.chat.completions.create(
                model="naive",
                messages=[
                    {"role": "system", "content": system_prompt(names)},
                    {"role": "user", "content": user_prompt(batch)},
                ],
            )
            answer = json.loads(response.choices[0].message.content or "{}")
            for entry in answer.get("labels", []):
                f.write(json.dumps(entry) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
