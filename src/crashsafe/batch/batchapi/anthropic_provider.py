"""Anthropic's Message Batches, through the official ``anthropic`` client (the optional
extra ``crashsafe[anthropic]``): what the batch-API runner needs, each call retried
through 429s, 5xx, 529s and dropped connections.

A Message Batch is made in one call that holds its requests (no file first), and it
carries no metadata. A run killed after making one, before it wrote the id down, finds it
among the batches made since the chunk's intent, of the chunk's size, that no chunk of
the ledger holds; while such a batch runs it cannot be told from another job's (its
requests' ids are seen only in its results), so the chunk waits for it to end, then takes
it if its results carry the chunk's ``custom_id``\\ s, and makes its own if none does.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson

from crashsafe.batch.batchapi.provider import (
    PENDING,
    SLACK,
    Answer,
    BatchState,
    Pending,
    RetriedCalls,
    mapping,
)
from crashsafe.errors import ConfigError

if TYPE_CHECKING:
    import anthropic

REFUSES = {401: "check ANTHROPIC_API_KEY", 403: "the key may not use Message Batches"}


def anthropic_client(base_url: str, api_key: str) -> anthropic.AsyncAnthropic:
    """The client for ``--base-url`` (``https://api.anthropic.com/v1``, as for the
    synchronous calls through its OpenAI-compatible endpoint: the client adds ``/v1``)."""
    try:
        import anthropic
    except ImportError:
        raise ConfigError(
            "--provider anthropic needs the anthropic package: pip install 'crashsafe[anthropic]'"
        ) from None
    root = base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    return anthropic.AsyncAnthropic(base_url=root, api_key=api_key, max_retries=0)


class AnthropicBatches(RetriedCalls):
    """The provider, for one job."""

    name = "anthropic"
    uses_files = False
    refuses = REFUSES
    transient = frozenset({429, 529})  # 529: overloaded
    client: anthropic.AsyncAnthropic

    def _errors(self) -> tuple[type[Exception], tuple[type[Exception], ...]]:
        import anthropic

        return anthropic.APIStatusError, (anthropic.APIConnectionError, anthropic.APITimeoutError)

    def request(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """A Messages request from a chat completion's body: its system message apart,
        ``max_tokens`` required (the runner always sets it)."""
        messages = body["messages"]
        system = "\n".join(m["content"] for m in messages if m["role"] == "system")
        params: dict[str, Any] = {
            "model": body["model"],
            "max_tokens": body["max_tokens"],
            "messages": [m for m in messages if m["role"] != "system"],
            "temperature": body.get("temperature", 0),
        }
        if system:
            params["system"] = system
        return {"custom_id": custom_id, "params": params}

    async def upload(self, filename: str, data: bytes) -> str:
        raise NotImplementedError("Message Batches take their requests in one call")

    async def find_file(self, filename: str, since: float) -> str | None:
        raise NotImplementedError("Message Batches take their requests in one call")

    async def create(
        self, file_id: str | None, requests: list[dict[str, Any]], metadata: dict[str, str]
    ) -> str:
        made = await self._call(
            "create a batch",
            lambda: self.client.messages.batches.create(requests=requests),  # type: ignore[arg-type]
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
        wanted = set(custom_ids)

        async def candidates() -> list[Any]:
            found = []
            async for batch in self.client.messages.batches.list(limit=100):
                if _unix(batch.created_at) < since - SLACK:
                    break  # newest first: older than the chunk's intent
                counts = batch.request_counts
                size = sum((counts.processing, counts.succeeded, counts.errored,
                            counts.canceled, counts.expired))  # fmt: skip
                # (fewer requests than the intent's: items left the input before it was
                # made, and their requests were not sent; at least those sent now)
                if batch.id not in known and max(least, 1) <= size <= len(custom_ids):
                    found.append(batch)
            return found

        found = await self._call("list batches", candidates)
        if any(b.processing_status != "ended" for b in found):
            return PENDING
        for batch in found:
            results = await self._results(str(batch.id))
            # A request's custom_id is the job's and its items': only this chunk asks them.
            if results and set(results) <= wanted:
                return str(batch.id)
        return None

    async def state(self, batch_id: str) -> BatchState:
        import anthropic

        try:
            found: Any = await self._call(
                "poll",
                lambda: self.client.messages.batches.retrieve(batch_id),
                may_be_gone=True,
            )
        except anthropic.NotFoundError:
            return BatchState.gone(batch_id)
        counts = found.request_counts
        done = counts.succeeded
        failed = counts.errored + counts.canceled + counts.expired
        return BatchState(
            str(found.processing_status), None, None, done, failed,
            done + failed + counts.processing, "", batch_id,
        )  # fmt: skip

    async def answers(self, state: BatchState) -> dict[str, Answer]:
        found = await self._results(state.batch_id)
        if found is None:
            self.say(f"batch-api: the results of {state.batch_id} are gone at the provider: "
                     "its requests are asked again")  # fmt: skip
            return {}
        return found

    async def _results(self, batch_id: str) -> dict[str, Answer] | None:
        """custom_id -> its result, read from the results file's bytes (a line the SDK
        could not read fails that request alone); None if the batch is gone."""
        import anthropic

        async def read() -> bytes:
            decoder = await self.client.messages.batches.results(batch_id)
            return bytes(await decoder.http_response.aread())

        try:
            data = await self._call("download results", read, may_be_gone=True)
        except anthropic.NotFoundError:
            return None
        found: dict[str, Answer] = {}
        for raw in data.splitlines():
            try:
                line = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(line, dict) and isinstance(line.get("custom_id"), str):
                answer = _answer(mapping(line.get("result")))
                prior = found.get(line["custom_id"])
                if prior is None or prior.text is None:
                    found[line["custom_id"]] = answer
        return found


def _answer(result: dict[str, Any]) -> Answer:
    kind = result.get("type")
    if kind != "succeeded":
        error = mapping(mapping(result.get("error")).get("error"))
        said = str(error.get("message") or error.get("type") or "")
        return Answer(None, f"{kind}: {said}" if said else str(kind or "a malformed result"))
    message = mapping(result.get("message"))
    found = mapping(message.get("usage"))
    usage = {name: v for key, name in (("input_tokens", "prompt_tokens"),
                                       ("output_tokens", "completion_tokens"))
             if isinstance(v := found.get(key), int)}  # fmt: skip
    usage["calls"] = 1
    content = message.get("content")
    texts = [mapping(c).get("text") for c in content] if isinstance(content, list) else []
    if not texts or not all(isinstance(t, str) for t in texts):
        return Answer(None, "an answer without text", usage)
    return Answer("".join(str(t) for t in texts), "", usage)


def _unix(moment: Any) -> float:
    if isinstance(moment, datetime):
        return moment.timestamp()
    try:
        return datetime.fromisoformat(str(moment)).timestamp()
    except ValueError:
        return 0.0
