"""The naive Batch-API job: the anti-pattern for ``crashsafe killtest --mode batch-api``.

What most scripts do with a provider's Batch API: cut the items into the same chunks as
crashsafe, upload each chunk's file and create its batch, poll until every batch has
ended, then append the answers. Nothing is written down before the answers, so a start
after a kill submits every chunk again, and pays for it again.

    python -m crashsafe.demo.naive_batch_api INPUT OUT BASE_URL LABELS PER_CHUNK POLL_SECONDS

It stops itself where ``CRASHSAFE_KILL_AT`` says, at the same named steps as crashsafe.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import openai

from crashsafe.batch.batchapi.runner import killpoint
from crashsafe.batch.items import Item, read_items
from crashsafe.batch.prompt import system_prompt, user_prompt

PER_REQUEST = 10  # items per request, as crashsafe's --batch-size


def request_line(custom_id: str, labels: list[str], items: list[Item]) -> str:
    messages = [
        {"role": "system", "content": system_prompt(labels)},
        {"role": "user", "content": user_prompt(items)},
    ]
    body = {"model": "naive", "messages": messages}
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 6:
        sys.exit("usage: python -m crashsafe.demo.naive_batch_api INPUT OUT BASE_URL LABELS "
                 "PER_CHUNK POLL_SECONDS")  # fmt: skip
    source, out, base_url, labels, per_chunk, poll = args
    names = labels.split(",")
    client = openai.OpenAI(base_url=base_url, api_key="local", max_retries=5)
    items = read_items(Path(source)).items
    requests = [items[i : i + PER_REQUEST] for i in range(0, len(items), PER_REQUEST)]
    lines = [request_line(f"req-{n}", names, group) for n, group in enumerate(requests)]
    size = int(per_chunk)
    batch_ids = []
    for start in range(0, len(lines), size):
        killpoint("intent")
        data = "".join(line + "\n" for line in lines[start : start + size]).encode()
        made = client.files.create(file=(f"chunk-{start}.jsonl", data), purpose="batch")
        killpoint("uploaded")
        killpoint("file")
        batch = client.batches.create(
            input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        killpoint("created")
        killpoint("batch")
        batch_ids.append(batch.id)
    ended: dict[str, str | None] = {}
    deadline = time.monotonic() + 3600
    while len(ended) < len(batch_ids) and time.monotonic() < deadline:
        for batch_id in batch_ids:
            if batch_id not in ended:
                found = client.batches.retrieve(batch_id)
                killpoint("polled")
                if found.status in ("completed", "expired", "cancelled", "failed"):
                    ended[batch_id] = found.output_file_id
        time.sleep(float(poll))
    with open(out, "a", encoding="utf-8") as f:
        for output in ended.values():
            if not output:
                continue
            for raw in client.files.content(output).content.splitlines():
                body = json.loads(raw)["response"]["body"]
                content = body["choices"][0]["message"]["content"]
                for entry in json.loads(content).get("labels", []):
                    f.write(json.dumps(entry) + "\n")
                f.flush()
                killpoint("answer")


if __name__ == "__main__":
    main()
