"""What the batch-API runner asks of a provider, whoever it is (``openai_provider.py``:
Files and Batches; ``anthropic_provider.py``: Message Batches), and what it gets back."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from crashsafe.batch.llm import redact
from crashsafe.batch.task import Usage
from crashsafe.errors import EndpointError
from crashsafe.tracing import span, tracer_from_env

T = TypeVar("T")

ENDED = frozenset({"completed", "expired", "cancelled", "failed", "ended", "gone"})
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
    batch_id: str = ""

    @property
    def ended(self) -> bool:
        return self.status in ENDED

    @classmethod
    def gone(cls, batch_id: str) -> BatchState:
        """A batch the provider no longer knows (404: deleted, another project's key, a
        stand-in restarted): nothing of it will ever come back."""
        said = f"batch {batch_id} is not found at the provider"
        return cls("gone", None, None, 0, 0, 0, said, batch_id)


@dataclass(frozen=True, slots=True)
class Answer:
    """One request's result: its reply's text, or why there is none; the tokens billed."""

    text: str | None
    error: str = ""
    usage: Usage | None = None


class MaybeMade(EndpointError):
    """A call that makes something (a batch) failed in a way that leaves unknown whether
    the provider made it (a dropped connection, a timeout, a 5xx): look before making
    it again."""


class Pending:
    """``find_batch``'s answer when a batch that may be the chunk's is still running and
    cannot be told apart yet (Anthropic's batches carry no metadata): look again later."""


PENDING = Pending()


class Provider(Protocol):
    name: str
    uses_files: bool  # a file is uploaded first, then a batch made of it (OpenAI)
    say: Callable[[str], None]

    def request(self, custom_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """A request of a batch, from a chat completion request's ``body``."""
        ...

    async def upload(self, filename: str, data: bytes) -> str: ...

    async def find_file(self, filename: str, since: float) -> str | None: ...

    async def create(
        self, file_id: str | None, requests: list[dict[str, Any]], metadata: dict[str, str]
    ) -> str:
        """A new batch's id; MaybeMade when it failed in a way that may have made it."""
        ...

    async def find_batch(
        self,
        metadata: dict[str, str],
        since: float,
        custom_ids: list[str],
        known: set[str],
        least: int = 1,
    ) -> str | Pending | None:
        """The batch made since ``since`` for the requests ``custom_ids`` (by a run
        killed before it wrote the id, or by a call whose answer was lost), not one of
        ``known``, of at least ``least`` requests (those the input still has: fewer were
        sent only if items left the input since); None if there is none (make it);
        PENDING if one may be and cannot be told yet."""
        ...

    async def state(self, batch_id: str) -> BatchState: ...

    async def answers(self, state: BatchState) -> dict[str, Answer]:
        """custom_id -> its result, for an ended batch (nothing for a lost file)."""
        ...


class RetriedCalls:
    """A provider's calls, each retried through 429s, 5xx and dropped connections, for one
    job. A subclass names its SDK's errors (``_errors``), the statuses after which no call
    can succeed (``refuses``) and the statuses worth retrying besides 429 and 5xx."""

    refuses: dict[int, str] = {}
    transient: frozenset[int] = frozenset({429})

    def __init__(self, client: Any, *, base_url: str, secrets: list[str], tries: int = 8,
                 backoff: float = 1.0) -> None:  # fmt: skip
        self.client = client
        self.base_url = base_url
        self._secrets = secrets
        self.tries = tries
        self.backoff = backoff
        self.say: Callable[[str], None] = lambda line: None
        self.tracer = tracer_from_env()  # a span per call to the provider when OTEL_* asks

    def _errors(self) -> tuple[type[Exception], tuple[type[Exception], ...]]:
        """The SDK's status error (``status_code``, ``message``) and its connection ones."""
        raise NotImplementedError

    async def _call(
        self,
        what: str,
        call: Callable[[], Awaitable[T]],
        *,
        may_be_gone: bool = False,
        makes: bool = False,
    ) -> T:
        """``call()``, retried. ``may_be_gone``: a 404 is raised as the SDK's own error for
        the caller to say what it means (elsewhere a 404 is a wrong base URL). ``makes``:
        a failure that may have made what it asked for is MaybeMade, never retried blind."""
        status_error, connection_errors = self._errors()
        for attempt in range(self.tries):
            try:
                with span(self.tracer, "batch.provider_call", **{
                    "crashsafe.call": what, "crashsafe.attempt": attempt + 1,
                    "server.address": self.base_url,
                }):  # fmt: skip
                    return await call()
            except status_error as exc:
                code: int = exc.status_code  # type: ignore[attr-defined]
                if may_be_gone and code == 404:
                    raise
                message = redact(f"HTTP {code}: {exc.message}", self._secrets)  # type: ignore[attr-defined]
                if code in self.refuses:
                    raise EndpointError(
                        f"{self.base_url} {what}: {message}: {self.refuses[code]}"
                    ) from None
                if code not in self.transient and code < 500:
                    raise EndpointError(f"{self.base_url} {what}: {message}") from None
                error = message
            except connection_errors as exc:
                error = f"{type(exc).__name__}: {exc.__cause__ or exc}"
            if makes:
                raise MaybeMade(f"{self.base_url} {what}: {error}")
            delay = self.backoff * 2**attempt * random.uniform(0.5, 1.5)
            self.say(f"{self.base_url} {what}: {error}; retrying in {delay:.1f} s")
            await asyncio.sleep(delay)
        raise EndpointError(f"{self.base_url} {what}: no answer after {self.tries} tries")


def mapping(value: Any) -> dict[str, Any]:
    """``value`` if a provider's line holds an object there, else an empty one."""
    return value if isinstance(value, dict) else {}
