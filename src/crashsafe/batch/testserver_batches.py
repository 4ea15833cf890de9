"""The Files and Batches endpoints of the local stand-in (``crashsafe batch llm-server``),
as OpenAI documents them, for tests, the demo and the kill test.

- ``POST /v1/files`` (multipart: ``file``, ``purpose``), ``GET /v1/files`` (``purpose``,
  ``after``, ``limit``; newest first), ``GET /v1/files/{id}``, ``GET /v1/files/{id}/content``.
- ``POST /v1/batches`` (``input_file_id``, ``endpoint``, ``completion_window``,
  ``metadata``), ``GET /v1/batches/{id}``, ``GET /v1/batches`` (``after``, ``limit``;
  newest first), ``POST /v1/batches/{id}/cancel``.

A batch moves validating -> in_progress -> finalizing -> completed as time passes
(``batch_seconds`` in all). When it completes, each line of its input file is answered
as a synchronous call would be (so labels, usage and billing are the same), into an
output file (status 200) and an error file (any other status). Knobs: every
``expire_every``-th batch expires with only the first half of its lines answered (the
rest are ``batch_expired`` errors); every ``line_error_every``-th line answers 500.
``/stats`` adds ``batches_created``, ``chunks_submitted_twice`` (batches whose metadata
names a (``crashsafe_job``, ``crashsafe_chunk``) that an earlier batch named) and
``items_submitted_twice`` (items in the requests of more than one batch, whoever made
them). Batches run whether or not anyone looks, as a provider's do: ``/stats`` moves every
batch on first, so a batch whose submitter was killed is billed when it ends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from crashsafe.batch.prompt import parse_items

if TYPE_CHECKING:
    from crashsafe.batch.testserver import LLMServer

COUNTS = ("total", "completed", "failed")
LIST_LIMIT = 20  # a page of a list, unless ``limit`` says otherwise (OpenAI's default)


@dataclass(slots=True)
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": len(self.data),
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed"}  # fmt: skip


@dataclass(slots=True)
class _Batch:
    id: str
    number: int
    input_file_id: str
    endpoint: str
    metadata: dict[str, str]
    created: float  # monotonic
    created_at: int
    status: str = "validating"
    ended: str | None = None  # completed, expired, cancelled, failed: output written
    output_file_id: str | None = None
    error_file_id: str | None = None
    counts: dict[str, int] = field(
        default_factory=lambda: {"total": 0, "completed": 0, "failed": 0}
    )
    times: dict[str, int] = field(default_factory=dict)
    errors: dict[str, Any] | None = None  # why a failed batch failed
    files_late: int = 0  # looks left that show it completed, its files not listed yet

    def json(self) -> dict[str, Any]:
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint,
            "input_file_id": self.input_file_id, "completion_window": "24h",
            "status": self.status, "created_at": self.created_at,
            "expires_at": self.created_at + 86400, "metadata": self.metadata,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
            "request_counts": dict(self.counts), "errors": self.errors, **self.times,
        }  # fmt: skip


class BatchesStandIn:
    """The files and batches of one stand-in server; lines answered by ``server``."""

    def __init__(self, server: LLMServer) -> None:
        self.server = server
        self.files: dict[str, _File] = {}
        self.batches: dict[str, _Batch] = {}
        self.chunks: Counter[tuple[str, str]] = Counter()
        self.submitted: Counter[str] = Counter()  # item id -> batches whose requests hold it
        self.lines_answered = 0
        self.uploads = 0  # batch files uploaded
        self.downloads = 0  # output and error files read
        self.hanging = 0  # looks at a batch left unanswered (hang_polls)
        from crashsafe.batch.testserver_messages import MessageBatchesStandIn

        self.messages = MessageBatchesStandIn(self)  # Anthropic's, counted here too

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self.upload)
        app.router.add_get("/v1/files", self.list_files)
        app.router.add_get("/v1/files/{id}", self.get_file)
        app.router.add_get("/v1/files/{id}/content", self.file_content)
        app.router.add_post("/v1/batches", self.create)
        app.router.add_get("/v1/batches", self.list_batches)
        app.router.add_get("/v1/batches/{id}", self.retrieve)
        app.router.add_post("/v1/batches/{id}/cancel", self.cancel)
        self.messages.routes(app)

    def reset(self) -> None:
        self.files.clear()
        self.batches.clear()
        self.chunks.clear()
        self.submitted.clear()
        self.messages.reset()
        self.lines_answered = 0
        self.uploads = self.downloads = 0

    def settle(self) -> None:
        """Move every batch on as far as time takes it (before counting)."""
        for batch in self.batches.values():
            self._advance(batch)
        self.messages.settle()

    def snapshot(self) -> dict[str, Any]:
        return {
            "batches_created": len(self.batches) + len(self.messages.batches),
            "batches_running": sum(1 for b in self.batches.values() if b.ended is None)
            + self.messages.running,
            "chunks_submitted_twice": sum(n - 1 for n in self.chunks.values()),
            "items_submitted_twice": sum(n - 1 for n in self.submitted.values()),
            "batch_lines_answered": self.lines_answered,
            "files_uploaded": self.uploads,
            "files_downloaded": self.downloads,
        }

    # -- files -----------------------------------------------------------------------------
    def _new_file(self, filename: str, purpose: str, data: bytes) -> _File:
        made = _File(f"file-{len(self.files) + 1:06d}", filename, purpose, data, int(time.time()))
        self.files[made.id] = made
        return made

    async def upload(self, request: web.Request) -> web.Response:
        form = await request.post()
        upload, purpose = form.get("file"), str(form.get("purpose", ""))
        if not isinstance(upload, web.FileField) or purpose != "batch":
            return _error(400, "a file and purpose=batch are required")
        self.uploads += 1
        return web.json_response(
            self._new_file(upload.filename, purpose, upload.file.read()).json()
        )

    async def list_files(self, request: web.Request) -> web.Response:
        purpose = request.query.get("purpose")
        found = [f for f in reversed(self.files.values()) if purpose in (None, f.purpose)]
        return _page([f.json() for f in found], request)

    async def get_file(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["id"])
        return _error(404, "no such file") if found is None else web.json_response(found.json())

    async def file_content(self, request: web.Request) -> web.Response:
        found = self.files.get(request.match_info["id"])
        if found is None:
            return _error(404, "no such file")
        self.downloads += 1
        return web.Response(body=found.data, content_type="application/octet-stream")

    # -- batches ---------------------------------------------------------------------------
    async def create(self, request: web.Request) -> web.Response:
        body = await request.json()
        source = self.files.get(str(body.get("input_file_id")))
        if source is None:
            return _error(400, "input_file_id: no such file")
        if self.server.options.refuse_batches:
            return _error(400, "this batch is refused (the stand-in's refuse_batches)")
        metadata = {str(k): str(v) for k, v in (body.get("metadata") or {}).items()}
        number = len(self.batches) + 1
        batch = _Batch(
            f"batch_{number:06d}", number, source.id, str(body.get("endpoint")), metadata,
            time.monotonic(), int(time.time()),
        )  # fmt: skip
        batch.counts["total"] = len(source.data.splitlines())
        self.batches[batch.id] = batch
        job = metadata.get("crashsafe_job")
        if job:
            self.chunks[(job, metadata.get("crashsafe_chunk", ""))] += 1
        self.submitted.update(_items_of(source.data))
        return web.json_response(batch.json())

    async def retrieve(self, request: web.Request) -> web.Response:
        if self.server.options.hang_polls:
            self.hanging += 1
            for _ in range(1200):  # until hang_polls is turned off (2 minutes at most)
                if not self.server.options.hang_polls:
                    break
                await asyncio.sleep(0.1)
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "no such batch")
        self._advance(batch)
        answer = batch.json()
        if batch.files_late > 0:  # (OpenAI has been seen to list it a moment later)
            batch.files_late -= 1
            answer.update(output_file_id=None)
        return web.json_response(answer)

    async def list_batches(self, request: web.Request) -> web.Response:
        for batch in self.batches.values():
            self._advance(batch)
        return _page([b.json() for b in reversed(self.batches.values())], request)

    async def cancel(self, request: web.Request) -> web.Response:
        batch = self.batches.get(request.match_info["id"])
        if batch is None:
            return _error(404, "no such batch")
        self._advance(batch)
        if batch.ended is None:
            self._end(batch, "cancelled", answer_up_to=0)
        return web.json_response(batch.json())

    def _advance(self, batch: _Batch) -> None:
        """Move ``batch`` on as far as the time since its creation takes it."""
        if batch.ended is not None:
            return
        span = max(self.server.options.batch_seconds, 0.0)
        age = time.monotonic() - batch.created
        now = int(time.time())
        if age >= span * 0.1:
            batch.status = "in_progress"
            batch.times.setdefault("in_progress_at", now)
        if age >= span * 0.8:
            batch.status = "finalizing"
            batch.times.setdefault("finalizing_at", now)
        if age >= span:
            every = self.server.options.expire_every
            if every > 0 and batch.number % every == 0:
                lines = len(self.files[batch.input_file_id].data.splitlines())
                self._end(batch, "expired", answer_up_to=lines // 2)
            else:
                self._end(batch, "completed", answer_up_to=None)

    def _end(self, batch: _Batch, status: str, *, answer_up_to: int | None) -> None:
        """Answer the lines of ``batch`` (all, or the first ``answer_up_to``) into its
        output and error files; the others end as ``batch_<status>`` errors."""
        lines = self.files[batch.input_file_id].data.splitlines()
        answered = lines if answer_up_to is None else lines[:answer_up_to]
        out: list[dict[str, Any]] = []
        errors: list[dict[str, Any]] = []
        every = self.server.options.line_error_every
        for raw in answered:
            request = json.loads(raw)
            self.lines_answered += 1
            self.server.requests += 1
            number = self.server.requests
            if every > 0 and self.lines_answered % every == 0:
                status_code, payload = 500, {"error": {"message": "line failed"}}
            else:
                status_code, payload, _ = self.server.answer(request.get("body") or {}, number)
            line = {"id": f"batch_req_{number}", "custom_id": request.get("custom_id"),
                    "response": {"status_code": status_code, "request_id": f"req_{number}",
                                 "body": payload}, "error": None}  # fmt: skip
            (out if status_code == 200 else errors).append(line)
        for raw in lines[len(answered) :]:
            request = json.loads(raw)
            errors.append({"id": None, "custom_id": request.get("custom_id"), "response": None,
                           "error": {"code": f"batch_{status}",
                                     "message": f"the batch {status} first"}})  # fmt: skip
        name = batch.id
        if out:
            batch.output_file_id = self._file_of(f"{name}_output.jsonl", out)
        if errors:
            batch.error_file_id = self._file_of(f"{name}_error.jsonl", errors)
        batch.counts.update(completed=len(out), failed=len(errors))
        batch.status = batch.ended = status
        batch.times.setdefault(f"{status}_at", int(time.time()))
        batch.files_late = self.server.options.files_late_polls

    def _file_of(self, filename: str, lines: list[dict[str, Any]]) -> str:
        data = "".join(json.dumps(line) + "\n" for line in lines).encode()
        return self._new_file(filename, "batch_output", data).id


def _items_of(data: bytes) -> set[str]:
    """The ids of the items a batch file's requests classify."""
    found: set[str] = set()
    for raw in data.splitlines():
        try:
            messages = json.loads(raw)["body"]["messages"]
            user = next(m["content"] for m in messages if m["role"] == "user")
        except (ValueError, KeyError, TypeError, StopIteration):
            continue
        found.update(i for i, _ in parse_items(user))
    return found


def _page(rows: list[dict[str, Any]], request: web.Request) -> web.Response:
    """A page of a cursor list: the rows after ``after`` (an id), at most ``limit``."""
    after = request.query.get("after")
    if after:
        ids = [row["id"] for row in rows]
        rows = rows[ids.index(after) + 1 :] if after in ids else []
    limit = int(request.query.get("limit", LIST_LIMIT))
    page = rows[:limit]
    return web.json_response({
        "object": "list", "data": page, "has_more": len(rows) > limit,
        "first_id": page[0]["id"] if page else None, "last_id": page[-1]["id"] if page else None,
    })  # fmt: skip


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "invalid_request_error"}},
                             status=status)  # fmt: skip
