"""The naive batch job: the anti-pattern for ``crashsafe killtest --mode batch``.

Same calls as crashsafe (10 items per call, N calls in flight) but no checkpoint: each
start classifies every item from the first one again and appends results as they come. A
restart pays for everything again and writes every result again.

    python -m crashsafe.demo.naive_batch INPUT.jsonl OUT.jsonl BASE_URL LABELS [CONCURRENCY]
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import openai

from crashsafe.batch.items import Item, read_items
from crashsafe.batch.prompt import system_prompt, user_prompt


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (4, 5):
        sys.exit("usage: python -m crashsafe.demo.naive_batch INPUT OUT BASE_URL LABELS [N]")
    source, out, base_url, labels = args[:4]
    concurrency = int(args[4]) if len(args) == 5 else 1
    names = labels.split(",")
    client = openai.OpenAI(base_url=base_url, api_key="local", max_retries=5)
    items = read_items(Path(source)).items

    def classify(batch: list[Item]) -> list[dict[str, str]]:
        response = client.chat.completions.create(
            model="naive",
            messages=[
                {"role": "system", "content": system_prompt(names)},
                {"role": "user", "content": user_prompt(batch)},
            ],
        )
        labels_found: list[dict[str, str]] = json.loads(
            response.choices[0].message.content or "{}"
        ).get("labels", [])
        return labels_found

    batches = [items[i : i + 10] for i in range(0, len(items), 10)]
    with open(out, "a", encoding="utf-8") as f, ThreadPoolExecutor(concurrency) as pool:
        for done in as_completed([pool.submit(classify, b) for b in batches]):
            for entry in done.result():
                f.write(json.dumps(entry) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
