"""LLM classification against the local OpenAI-compatible server (no network)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from crashsafe.batch.checkpoint import scan
from crashsafe.batch.items import Item, read_items
from crashsafe.batch.llm import Classifier, validate
from crashsafe.batch.runner import BatchRunner, BatchSettings, BatchSummary
from crashsafe.batch.task import BatchTaskError, TaskCaller
from crashsafe.batch.testserver import LLMServer, LLMServerOptions, LLMServerThread, label_for
from crashsafe.demo.server import AppThread
from crashsafe.errors import ConfigError, EndpointError

LABELS = ["positive", "negative", "neutral"]


def reviews(tmp_path: Path, n: int = 40) -> Path:
    words = ["great", "terrible", "fine"]
    src = tmp_path / "reviews.jsonl"
    src.write_text(
        "".join(json.dumps({"text": f"review {k}: {words[k % 3]} kettle"}) + "\n" for k in range(n))
    )
    return src


def classify(base_url: str, src: Path, cp: Path, **settings: Any) -> BatchSummary:
    task = Classifier(labels=LABELS, base_url=base_url, model="t", api_key="k", backoff_base=0.05)
    runner = BatchRunner(
        TaskCaller(task, threads=4),
        read_items(src),
        cp,
        BatchSettings(**settings),
        echo=lambda _line: None,
        handle_signals=False,
    )
    return asyncio.run(runner.run())


def test_classify_labels_every_item_and_counts_tokens(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path), tmp_path / "r.jsonl"
    with LLMServerThread() as server:
        summary = classify(server.base_url, src, cp)
        stats = server.server.snapshot()
    assert summary.items_ok == 40 and summary.batches_ok == 4
    lines = [json.loads(x) for x in cp.read_text().splitlines()]
    texts = {i.id: i.text for i in read_items(src).items}
    for line in lines:
        for item_id, result in zip(line["ids"], line["results"], strict=True):
            assert result == {"label": label_for(texts[item_id], LABELS)}
    assert summary.usage["prompt_tokens"] == stats["tokens"]["prompt_tokens"]
    assert summary.usage["completion_tokens"] == stats["tokens"]["completion_tokens"]
    assert summary.usage["calls"] == 4


def test_429_cooldown_is_shared_by_all_batches_in_flight(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, 80), tmp_path / "r.jsonl"
    options = LLMServerOptions(latency_ms=20, rate_limit_every=5, retry_after=0.5)
    server = LLMServer(options)
    times: list[tuple[float, int]] = []
    original = server.completions

    async def recording(request: web.Request) -> web.Response:
        response = await original(request)
        times.append((time.monotonic(), response.status))
        return response

    server.completions = recording  # type: ignore[method-assign]
    with AppThread(server.app()) as thread:
        summary = classify(f"{thread.url}/v1", src, cp, concurrency=4)
    assert summary.items_ok == 80
    limited = [t for t, status in times if status == 429]
    assert limited
    # After the first 429, nobody starts a request before Retry-After has passed: the
    # requests that answered within 0.5 s were already in flight when it came.
    first = limited[0]
    started_after = [t for t, _ in times if first < t < first + 0.5 - 0.02]
    assert len(started_after) <= 4  # only those already in flight (latency 20 ms)


def test_invalid_output_is_reasked_and_both_attempts_paid(tmp_path: Path) -> None:
    src, cp = reviews(tmp_path, 10), tmp_path / "r.jsonl"
    with LLMServerThread(LLMServerOptions(invalid_every=1)) as server:
        summary = classify(server.base_url, src, cp, max_attempts=1)
    assert summary.batches_failed == 1  # every answer broken: 3 asks, then the dead letter
    assert summary.usage["calls"] == 3 and summary.usage["reasks"] == 3
    src20 = reviews(tmp_path, 20)
    with LLMServerThread(LLMServerOptions(invalid_every=2)) as server:
        # request 1 answers batch 1; request 2 (batch 2) is broken, request 3 re-asks it
        ok = classify(server.base_url, src20, tmp_path / "r2.jsonl", concurrency=1)
    assert ok.items_ok == 20 and ok.usage["calls"] == 3 and ok.usage["reasks"] == 1


@pytest.mark.parametrize("concurrency", [1, 4])
def test_spend_cap_caps_what_is_spent(tmp_path: Path, concurrency: int) -> None:
    src, cp = reviews(tmp_path, 100), tmp_path / "r.jsonl"
    with LLMServerThread() as server:
        summary = classify(
            server.base_url, src, cp, concurrency=concurrency, price_in=1000.0,
            price_out=1000.0, max_spend=0.5,
        )  # fmt: skip
    assert summary.stopped_by == "spend cap"
    # batches here cost the same: reserving 1.5x the costliest one before each start keeps
    # the spend under the cap, with 4 batches in flight as with one
    assert 0 < summary.batches_ok < 10 and 0 < summary.spent <= 0.5


def test_a_spend_cap_without_prices_is_refused() -> None:
    with pytest.raises(ConfigError, match="--max-spend needs the model's prices"):
        BatchSettings(max_spend=5)


def test_validate_names_the_problem() -> None:
    items = [Item("a", "x"), Item("b", "y")]
    good = '{"labels": [{"id": "b", "label": "neutral"}, {"id": "a", "label": "positive"}]}'
    assert validate(good, items, LABELS) == [{"label": "positive"}, {"label": "neutral"}]
    with pytest.raises(ValueError, match="no label for id"):
        validate('{"labels": [{"id": "a", "label": "neutral"}]}', items, LABELS)
    with pytest.raises(ValueError, match=r"label.*meh.*not among"):
        validate(good.replace("neutral", "meh"), items, LABELS)
    with pytest.raises(ValueError, match="not the JSON object"):
        validate('{"labels": "nope"', items, LABELS)


def test_ids_that_would_end_their_brackets_or_line_are_answered(tmp_path: Path) -> None:
    # "[a]b] text" ended its id at the first "]": never answered, paid for on every run
    odd = ["a]b", "[z]", 'say "hi"', '"quoted"', "two\nlines", "plain"]
    src, cp = tmp_path / "odd.jsonl", tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps({"id": i, "text": f"I love it {n}"}) + "\n"
                           for n, i in enumerate(odd)))  # fmt: skip
    with LLMServerThread() as server:
        summary = classify(server.base_url, src, cp)
    assert summary.items_ok == len(odd) and summary.batches_failed == 0
    assert scan(cp).done_ids() == set(odd)
    items = [Item("a]b", "x")]  # a model that echoes the id as the prompt showed it
    assert validate('{"labels": [{"id": "\\"a]b\\"", "label": "neutral"}]}', items, LABELS) == [
        {"label": "neutral"}
    ]


@pytest.mark.parametrize(
    ("status", "hint"),
    [(401, "check OPENAI_API_KEY"), (403, "not allowed"), (404, "check --base-url"), (400, "")],
)
def test_client_errors_are_not_retried(status: int, hint: str) -> None:
    calls = 0

    async def reject(request: web.Request) -> web.Response:
        nonlocal calls
        calls += 1
        return web.json_response({"error": {"message": "no"}}, status=status)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", reject)
    with AppThread(app) as thread:
        task = Classifier(labels=LABELS, base_url=f"{thread.url}/v1", model="t", api_key="k")

        async def once() -> None:
            try:
                await task([Item("a", "x")])
            finally:
                await task.aclose()

        # 401/403/404: no call can succeed, the job stops saying what to check; another
        # 4xx fails its batch only
        expected = EndpointError if hint else BatchTaskError
        with pytest.raises(expected, match=f"HTTP {status}.*{hint}"):
            asyncio.run(once())
    assert calls == 1


def test_an_endpoint_that_cannot_be_reached_stops_the_job_at_once(tmp_path: Path) -> None:
    import socket
    import time

    with socket.socket() as probe:  # a port nobody listens on: connection refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    src, cp = reviews(tmp_path), tmp_path / "r.jsonl"
    started = time.monotonic()
    with pytest.raises(EndpointError, match=f"cannot reach http://127.0.0.1:{port}/v1"):
        classify(f"http://127.0.0.1:{port}/v1", src, cp)
    assert time.monotonic() - started < 30  # not minutes of silent retries
    assert scan(cp).lines == []
