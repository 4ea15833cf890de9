"""A local OpenAI-compatible chat endpoint for tests, the batch demo and the kill test.

``POST /v1/chat/completions`` (and each line of a batch: ``testserver_batches.py``)
answers the classification prompt of ``prompt.py`` with
deterministic labels (sentiment words decide, else a hash of the text), and usage figures
computed from the text length. It can misbehave on purpose: latency, a 429 with
``Retry-After`` every Nth request, an invalid answer every Nth request, 500s. ``/stats``
counts requests and every item billed, so a kill test can count items paid twice;
``POST /reset`` zeroes the counts.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from crashsafe.batch.prompt import parse_items, parse_labels
from crashsafe.demo.server import AppThread

POSITIVE = ("great", "love", "excellent", "perfect", "amazing", "happy", "recommend")
NEGATIVE = ("broke", "terrible", "awful", "poor", "refund", "disappointed", "worst")


@dataclass(frozen=True, slots=True)
class LLMServerOptions:
    latency_ms: float = 0.0
    rate_limit_every: int = 0  # every Nth request answers 429
    retry_after: float = 0.2
    invalid_every: int = 0  # every Nth request answers with broken JSON
    error_every: int = 0  # every Nth request answers 500
    batch_seconds: float = 0.3  # a batch's time from creation to completion (Batches API)
    expire_every: int = 0  # every Nth batch expires half done
    line_error_every: int = 0  # every Nth line of a batch answers 500
    hang_polls: bool = False  # a look at a batch never answers (Ctrl-C must still stop a run)
    files_late_polls: int = 0  # an ended batch's first N looks show no output file (OpenAI)
    refuse_batches: bool = False  # making a batch answers 400 (too large, a bad request)


def label_for(text: str, labels: list[str]) -> str:
    words = text.lower()
    if "positive" in labels and any(w in words for w in POSITIVE):
        return "positive"
    if "negative" in labels and any(w in words for w in NEGATIVE):
        return "negative"
    if "neutral" in labels:
        return "neutral"
    digest = hashlib.sha256(text.encode()).digest()
    return labels[digest[0] % len(labels)]


class LLMServer:
    def __init__(self, options: LLMServerOptions | None = None) -> None:
        self.options = options or LLMServerOptions()
        self.requests = 0
        self.api_calls = 0  # every request under /v1/
        self.statuses: Counter[int] = Counter()
        self.billed: Counter[str] = Counter()
        self.tokens = Counter[str]()
        from crashsafe.batch.testserver_batches import BatchesStandIn

        self.batches = BatchesStandIn(self)

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._count_calls])
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/stats", self.stats)
        app.router.add_post("/reset", self.reset)
        self.batches.routes(app)
        return app

    @web.middleware
    async def _count_calls(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Every call to the API (not /stats nor /reset): a kill test kills after the k-th."""
        if request.path.startswith("/v1/"):
            self.api_calls += 1
        response: web.StreamResponse = await handler(request)
        return response

    async def reset(self, request: web.Request) -> web.Response:
        self.api_calls = 0
        self.requests = 0
        self.statuses.clear()
        self.billed.clear()
        self.tokens.clear()
        self.batches.reset()
        return web.json_response(self.snapshot())

    async def completions(self, request: web.Request) -> web.Response:
        self.requests += 1
        number = self.requests  # this request's number, fixed before any await
        body = await request.json()
        if self.options.latency_ms:
            await asyncio.sleep(self.options.latency_ms / 1000)
        status, payload, headers = self.answer(body, number)
        return web.json_response(payload, status=status, headers=headers)

    def answer(
        self, body: dict[str, Any], number: int
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        """The answer to chat completion request number ``number`` (its status, its JSON,
        its headers): the same for a synchronous call and a line of a batch file."""

        def every(n: int) -> bool:
            return n > 0 and number % n == 0

        o = self.options
        if every(o.rate_limit_every):
            self.statuses[429] += 1
            return (
                429,
                {"error": {"message": "rate limited", "type": "rate_limit"}},
                {"Retry-After": f"{o.retry_after:g}"},
            )
        if every(o.error_every):
            self.statuses[500] += 1
            return 500, {"error": {"message": "boom"}}, {}
        messages = body.get("messages", [])
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = next((m["content"] for m in messages if m["role"] == "user"), "")
        labels = parse_labels(system) or ["positive", "negative", "neutral"]
        items = parse_items(user)
        answer = {"labels": [{"id": i, "label": label_for(t, labels)} for i, t in items]}
        content = json.dumps(answer)
        if every(o.invalid_every):
            content = content[: len(content) // 2]  # cut off: not JSON
        prompt_tokens = sum(len(m.get("content", "")) for m in messages) // 4 + 1
        completion_tokens = len(content) // 4 + 1
        self.statuses[200] += 1
        self.billed.update(i for i, _ in items)
        self.tokens.update({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens})
        return (
            200,
            {
                "id": f"chatcmpl-{number}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "test"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
            {},
        )

    def snapshot(self) -> dict[str, Any]:
        self.batches.settle()  # batches run unwatched, as a provider's do: bill them first
        return {
            "requests": self.requests,
            "api_calls": self.api_calls,
            "statuses": {str(k): v for k, v in self.statuses.items()},
            "items_billed": sum(self.billed.values()),
            "distinct_items_billed": len(self.billed),
            "items_paid_twice": sum(n - 1 for n in self.billed.values()),
            "tokens": dict(self.tokens),
            **self.batches.snapshot(),
        }

    async def stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot())


class LLMServerThread(AppThread):
    """The test LLM server on a background thread; ``base_url`` ends in ``/v1``."""

    def __init__(self, options: LLMServerOptions | None = None, *, port: int = 0) -> None:
        self.server = LLMServer(options)
        super().__init__(self.server.app(), port=port)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"
