"""OpenAI's Files and Batches endpoints (any OpenAI-compatible base URL that implements
them), through the official ``openai`` client: what the batch-API runner needs, each call
retried through 429s, 5xx and dropped connections, and the lookups that reconcile a run
killed half-way with what the provider holds.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import openai

from crashsafe.batch.llm import REFUSES_EVERYTHING, redact
from crashsafe.errors import EndpointError

T = TypeVar("T")
ENDED = frozenset({"completed", "expired", "cancelled", "failed", "gone"})
SLACK = 600.0  # seconds: a file or batch made before its intent was written, by clock skew


@dataclass(frozen=True, slots=True)
class BatchState:
    status: str
    output_file_id: str | None
    error_file_id: str | None
    completed: int
    failed: int
    total: int
    errors: str = ""  # why the provider failed the batch, as it says

    @classmethod
    def gone(cls, batch_id: str) -> BatchState:
        """A batch the provider no longer knows (404: deleted, another project's key, a
        stand-in restarted): nothing of it will ever come back."""
        return cls("gone", None, None, 0, 0, 0, f"batch {batch_id} is not found at the provider")

    @property
    def ended(self) -> bool:
        return self.status in ENDED


class OpenAIBatches:
    """The provider, for one job: ``client`` is the classifier's ``AsyncOpenAI``."""

    def __init__(self, client: openai.AsyncOpenAI, *, base_url: str, secrets: list[str],
                 tries: int = 8, backoff: float = 1.0) -> None:  # fmt: skip
        self.client = client
        self.base_url = base_url
        self._secrets = secrets
        self.tries = tries
        self.backoff = backoff
        self.say: Callable[[str], None] = lambda line: None

    async def _call(
        self, what: str, call: Callable[[], Awaitable[T]], *, may_be_gone: bool = False
    ) -> T:
        """``call()``, retried; ``may_be_gone``: a 404 is raised as NotFoundError for the
        caller to say what it means (elsewhere a 404 is a wrong base URL)."""
        for attempt in range(self.tries):
            try:
                return await call()
            except openai.APIStatusError as exc:
                if may_be_gone and isinstance(exc, openai.NotFoundError):
                    raise
                message = redact(f"HTTP {exc.status_code}: {exc.message}", self._secrets)
                if exc.status_code in REFUSES_EVERYTHING:
                    hint = REFUSES_EVERYTHING[exc.status_code]
                    raise EndpointError(f"{self.base_url} {what}: {message}: {hint}") from None
                if exc.status_code != 429 and exc.status_code < 500:
                    raise EndpointError(f"{self.base_url} {what}: {message}") from None
                error = message
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                error = f"{type(exc).__name__}: {exc.__cause__ or exc}"
            delay = self.backoff * 2**attempt * random.uniform(0.5, 1.5)
            self.say(f"{self.base_url} {what}: {error}; retrying in {delay:.1f} s")
            await asyncio.sleep(delay)
        raise EndpointError(f"{self.base_url} {what}: no answer after {self.tries} tries")

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
    async def create(self, file_id: str, metadata: dict[str, str]) -> str:
        made = await self._call(
            "create a batch",
            lambda: self.client.batches.create(
                input_file_id=file_id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                metadata=metadata,
            ),
        )
        return str(made.id)

    async def find_batch(self, metadata: dict[str, str], since: float) -> str | None:
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
        return BatchState(
            str(found.status), found.output_file_id, found.error_file_id,
            counts.completed if counts else 0, counts.failed if counts else 0,
            counts.total if counts else 0, said,
        )  # fmt: skip
