"""OpenAI's Files and Batches endpoints (any OpenAI-compatible base URL that implements
them), through the official ``openai`` client: what the batch-API runner needs, each call
retried through 429s, 5xx and dropped connections, and the lookups that reconcile a run
killed half-way with what the provider holds.
"""

from __future__ import annotations

import time
from typing import Any

import openai
import orjson

from crashsafe.batch.batchapi.provider import (
    SLACK,
    Answer,
    BatchState,
    Pending,
    RetriedCalls,
    mapping,
)
from crashsafe.batch.llm import REFUSES_EVERYTHING

FILES_LATE = 600.0  # seconds a completed batch's answer files may take to be listed


class OpenAIBatches(RetriedCalls):
    """The provider, for one job: ``client`` is the classifier's ``AsyncOpenAI``."""

    name = "openai"
    uses_files = True
    refuses = REFUSES_EVERYTHING
    client: openai.AsyncOpenAI

    def __init__(self, client: Any, **options: Any) -> None:
        super().__init__(client, **options)
        self._late: dict[str, float] = {}  # batch id -> when it was first seen without files
        self.files_late = FILES_LATE

    def _errors(self) -> tuple[type[Exception], tuple[type[Exception], ...]]:
        return openai.APIStatusError, (openai.APIConnectionError, openai.APITimeoutError)

    def request(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                "body": body}  # fmt: skip

    # -- files -----------------------------------------------------------------------------
    async def upload(self, filename: str, data: bytes) -> str:
        made = await self._call(
            "upload", lambda: self.client.files.create(file=(filename, data), purpose="batch")
        )
        return str(made.id)

    async def find_file(self, filename: str, since: float) -> str | None:
        """The id of a batch file named ``filename`` uploaded since ``since`` (a run killed
        after its upload, before it wrote the id down), or None."""

        async def look() -> str | None:
            async for found in self.client.files.list(purpose="batch"):
                if found.filename == filename:
                    return str(found.id)
                if found.created_at < since - SLACK:
                    return None  # newest first: older than the chunk's intent
            return None

        return await self._call("list files", look)

    async def content(self, file_id: str) -> bytes | None:
        """A file's bytes; None if the provider no longer has it."""
        try:
            answer = await self._call(
                "download", lambda: self.client.files.content(file_id), may_be_gone=True
            )
        except openai.NotFoundError:
            return None
        return bytes(answer.content)

    # -- batches ---------------------------------------------------------------------------
    async def create(
        self, file_id: str | None, requests: list[dict[str, Any]], metadata: dict[str, str]
    ) -> str:
        assert file_id is not None, "OpenAI's batches are made of an uploaded file"
        made = await self._call(
            "create a batch",
            lambda: self.client.batches.create(
                input_file_id=file_id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata=metadata,
            ),
            makes=True,
        )
        return str(made.id)

    async def find_batch(
        self,
        metadata: dict[str, str],
        since: float,
        custom_ids: list[str],
        known: set[str],
        least: int = 1,
    ) -> str | Pending | None:
        """The id of a batch created with ``metadata`` since ``since`` (a run killed after
        creating it, before it wrote the id down), or None."""

        async def look() -> str | None:
            async for found in self.client.batches.list(limit=100):
                held = found.metadata or {}
                if all(held.get(k) == v for k, v in metadata.items()):
                    return str(found.id)
                if found.created_at < since - SLACK:
                    return None  # newest first
            return None

        return await self._call("list batches", look)

    async def state(self, batch_id: str) -> BatchState:
        try:
            found: Any = await self._call(
                "poll", lambda: self.client.batches.retrieve(batch_id), may_be_gone=True
            )
        except openai.NotFoundError:
            return BatchState.gone(batch_id)
        counts = found.request_counts
        errors = getattr(found.errors, "data", None) or []
        said = "; ".join(str(e.message or e.code) for e in errors[:3])
        status = str(found.status)
        if (
            status in ("completed", "expired", "cancelled")
            and not found.output_file_id
            and counts is not None
            and counts.completed
        ):  # answers counted, not listed yet
            status = self._files_late(batch_id, status)
        return BatchState(
            status, found.output_file_id, found.error_file_id,
            counts.completed if counts else 0, counts.failed if counts else 0,
            counts.total if counts else 0, said, batch_id,
        )  # fmt: skip

    def _files_late(self, batch_id: str, status: str = "completed") -> str:
        """The status of a batch said ended, with requests answered, whose output file is
        not listed yet (OpenAI has been seen to list it a moment later): still
        ``finalizing`` for up to ``files_late`` seconds, then ``status`` (its requests are
        asked again). Taken as ended at once, every answered request was paid for twice."""
        now = time.monotonic()
        first = self._late.setdefault(batch_id, now)
        if first == now:
            self.say(f"batch-api: batch {batch_id} {status}, but its answer files are not "
                     "listed yet: waiting for them")  # fmt: skip
        if now - first < self.files_late:
            return "finalizing"
        self.say(f"batch-api: batch {batch_id} {status} without its output file after "
                 f"{self.files_late:.0f} s: its requests are asked again")  # fmt: skip
        return status

    async def answers(self, state: BatchState) -> dict[str, Answer]:
        """The output file's answers and the error file's failures (an answer, if both
        hold the same request); a file gone at the provider answers nothing."""
        found: dict[str, Answer] = {}
        conflicting = 0  # requests answered twice, differently (the first answer is kept)
        for file_id in (state.output_file_id, state.error_file_id):
            content = await self.content(file_id) if file_id else None
            if content is None:
                if file_id:
                    self.say(f"batch-api: file {file_id} is gone at the provider: its "
                             "requests are asked again")  # fmt: skip
                continue
            for raw in content.splitlines():
                try:
                    line = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(line, dict) and isinstance(line.get("custom_id"), str):
                    answer = _answer(line)
                    prior = found.get(line["custom_id"])
                    if prior is None or prior.text is None:
                        found[line["custom_id"]] = answer  # an answer is never replaced
                    elif answer.text is not None and answer.text != prior.text:
                        conflicting += 1
        if conflicting:
            self.say(f"batch-api: batch {state.batch_id} answered {conflicting} request(s) "
                     "twice, differently: the first answer of each is kept")  # fmt: skip
        return found


def _answer(line: dict[str, Any]) -> Answer:
    """A line of an output or error file, as an answer or why there is none."""
    if not isinstance(line.get("response") or {}, dict):
        return Answer(None, "a malformed answer line (its response is not an object)")
    response = mapping(line.get("response"))
    if response.get("status_code") != 200:
        error = mapping(line.get("error")) or mapping(mapping(response.get("body")).get("error"))
        code = response.get("status_code")
        said = str(error.get("message") or error.get("code") or "no error given")
        return Answer(None, f"HTTP {code}: {said}" if code else said)
    if not isinstance(response.get("body"), dict):
        return Answer(None, "a malformed answer line (its body is not an object)")
    body = mapping(response.get("body"))
    found = mapping(body.get("usage"))
    usage = {k: v for k in ("prompt_tokens", "completion_tokens")
             if isinstance(v := found.get(k), int)}  # fmt: skip
    usage["calls"] = 1
    try:
        text = body["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        return Answer(None, "an answer without a message", usage)
    if not isinstance(text, str):
        return Answer(None, "an answer without a message", usage)
    return Answer(text, "", usage)
