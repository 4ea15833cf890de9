"""Anthropic's Message Batches endpoints on the local stand-in (``crashsafe batch
llm-server``), as Anthropic documents them, for the ``anthropic`` client in tests and the
demo.

- ``POST /v1/messages/batches`` (``requests``: ``custom_id`` and Messages ``params``),
  ``GET /v1/messages/batches`` (``limit``, ``after_id``; newest first),
  ``GET /v1/messages/batches/{id}``, ``POST /v1/messages/batches/{id}/cancel``,
  ``GET /v1/messages/batches/{id}/results`` (JSON Lines, once the batch has ended).

A batch is ``in_progress`` for ``batch_seconds``, then ``ended``: each request answered as
a synchronous call would be (the same labels, tokens and billing), ``succeeded`` or
``errored`` (every ``line_error_every``-th request); every ``expire_every``-th batch
expires with only the first half of its requests answered (the rest ``expired``). The
counts (batches, items submitted twice, lines answered) are those of the Files and
Batches stand-in, which owns this one.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web

from crashsafe.batch.prompt import parse_items

if TYPE_CHECKING:
    from crashsafe.batch.testserver_batches import BatchesStandIn

KINDS = ("processing", "succeeded", "errored", "canceled", "expired")


def _when(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).isoformat().replace("+00:00", "Z")


@dataclass(slots=True)
class _MessageBatch:
    id: str
    number: int
    requests: list[dict[str, Any]]
    created: float  # monotonic
    created_at: float
    results: list[dict[str, Any]] | None = None  # once ended
    ended_at: float | None = None
    cancel_at: float | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def json(self, base: str) -> dict[str, Any]:
        ended = self.results is not None
        return {
            "id": self.id, "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {k: self.counts.get(k, 0) for k in KINDS}
            if ended else {**{k: 0 for k in KINDS}, "processing": len(self.requests)},
            "created_at": _when(self.created_at), "expires_at": _when(self.created_at + 86400),
            "ended_at": _when(self.ended_at) if self.ended_at else None,
            "cancel_initiated_at": _when(self.cancel_at) if self.cancel_at else None,
            "archived_at": None,
            "results_url": f"{base}/v1/messages/batches/{self.id}/results" if ended else None,
        }  # fmt: skip


class MessageBatchesStandIn:
    def __init__(self, owner: BatchesStandIn) -> None:
        self.owner = owner
        self.batches: dict[str, _MessageBatch] = {}

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages/batches", self.create)
        app.router.add_get("/v1/messages/batches", self.list_batches)
        app.router.add_get("/v1/messages/batches/{id}", self.retrieve)
        app.router.add_post("/v1/messages/batches/{id}/cancel", self.cancel)
        app.router.add_get("/v1/messages/batches/{id}/results", self.results)

    def reset(self) -> None:
        self.batches.clear()

    def settle(self) -> None:
        for batch in self.batches.values():
            self._advance(batch)

    @property
    def running(self) -> int:
        return sum(1 for b in self.batches.values() if b.results is None)

    @staticmethod
    def _base(request: web.Request) -> str:
        return f"{request.scheme}://{request.host}"

    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        requests = body.get("requests") if isinstance(body, dict) else None
        if not isinstance(requests, list) or not requests:
            return _error(400, "requests: a non-empty list is required")
        ids = [r.get("custom_id") for r in requests if isinstance(r, dict)]
        if len(ids) != len(requests) or len(set(ids)) != len(ids):
            return _error(400, "requests: each needs a custom_id of its own")
        number = len(self.batches) + 1
        batch = _MessageBatch(
            f"msgbatch_{number:06d}", number, requests, time.monotonic(), time.time()
        )
        self.batches[batch.id] = batch
        self.owner.submitted.update(_items_of(requests))
        return web.json_response(batch.json(self._base(request)))

    async def retrieve(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "no such message batch", "not_found_error")
        self._advance(batch)
        return web.json_response(batch.json(self._base(request)))

    async def list_batches(self, request: web.Request) -> web.Response:
        self.settle()
        rows = [b.json(self._base(request)) for b in reversed(self.batches.values())]
        after = request.query.get("after_id")
        if after:
            ids = [row["id"] for row in rows]
            rows = rows[ids.index(after) + 1 :] if after in ids else []
        limit = int(request.query.get("limit", 20))
        page = rows[:limit]
        return web.json_response({
            "data": page, "has_more": len(rows) > limit,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
        })  # fmt: skip

    async def cancel(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "no such message batch", "not_found_error")
        self._advance(batch)
        if batch.results is None:
            batch.cancel_at = time.time()
            self._end(batch, "canceled", answer_up_to=0)
        return web.json_response(batch.json(self._base(request)))

    async def results(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "no such message batch", "not_found_error")
        self._advance(batch)
        if batch.results is None:
            return _error(400, "the batch is still in progress")
        self.owner.downloads += 1
        data = "".join(json.dumps(line) + "\n" for line in batch.results)
        return web.Response(body=data.encode(), content_type="application/binary")

    def _advance(self, batch: _MessageBatch) -> None:
        if batch.results is not None:
            return
        options = self.owner.server.options
        if time.monotonic() - batch.created < max(options.batch_seconds, 0.0):
            return
        every = options.expire_every
        if every > 0 and batch.number % every == 0:
            self._end(batch, "expired", answer_up_to=len(batch.requests) // 2)
        else:
            self._end(batch, "", answer_up_to=None)

    def _end(self, batch: _MessageBatch, unrun: str, *, answer_up_to: int | None) -> None:
        """Answer the requests of ``batch`` (all, or the first ``answer_up_to``); the
        others end as ``unrun`` (expired, canceled)."""
        server = self.owner.server
        answered = batch.requests if answer_up_to is None else batch.requests[:answer_up_to]
        results: list[dict[str, Any]] = []
        every = server.options.line_error_every
        for request in answered:
            self.owner.lines_answered += 1
            server.requests += 1
            number = server.requests
            if every > 0 and self.owner.lines_answered % every == 0:
                status, payload = 500, {"error": {"message": "request failed"}}
            else:
                status, payload, _ = server.answer(_chat_body(request.get("params") or {}), number)
            results.append({"custom_id": request["custom_id"], "result": _result(status, payload)})
        for request in batch.requests[len(answered) :]:
            results.append({"custom_id": request["custom_id"], "result": {"type": unrun}})
        batch.counts = {k: sum(1 for r in results if r["result"]["type"] == k) for k in KINDS}
        batch.results = results
        batch.ended_at = time.time()


def _chat_body(params: dict[str, Any]) -> dict[str, Any]:
    """A Messages request as the chat completion the stand-in answers."""
    system = params.get("system")
    messages = [{"role": "system", "content": system}] if isinstance(system, str) else []
    return {"model": params.get("model"), "messages": messages + list(params.get("messages", []))}


def _result(status: int, payload: dict[str, Any]) -> dict[str, Any]:
    if status != 200:
        message = str((payload.get("error") or {}).get("message") or "failed")
        return {"type": "errored", "error": {"type": "error", "error": {
            "type": "api_error", "message": message}}}  # fmt: skip
    usage = payload["usage"]
    return {"type": "succeeded", "message": {
        "id": f"msg_{payload['id']}", "type": "message", "role": "assistant",
        "model": payload["model"], "stop_reason": "end_turn", "stop_sequence": None,
        "content": [{"type": "text", "text": payload["choices"][0]["message"]["content"]}],
        "usage": {"input_tokens": usage["prompt_tokens"],
                  "output_tokens": usage["completion_tokens"]},
    }}  # fmt: skip


def _items_of(requests: list[dict[str, Any]]) -> set[str]:
    found: set[str] = set()
    for request in requests:
        for message in (request.get("params") or {}).get("messages", []):
            if isinstance(message, dict) and message.get("role") == "user":
                found.update(i for i, _ in parse_items(str(message.get("content", ""))))
    return found


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    return web.json_response(
        {"type": "error", "error": {"type": kind, "message": message}}, status=status
    )
