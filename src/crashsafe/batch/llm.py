"""LLM tasks with any OpenAI-compatible chat endpoint, paying for nothing twice in a run:
``PromptTask`` (a prompt per batch of items, its answer read into one result per item:
subclass it for a task of your own) and ``Classifier`` (``batch classify``).

Answers are validated and re-asked when invalid; 429 and 5xx are
retried honouring ``Retry-After``, with one cooldown shared by every batch in flight (when
the endpoint says "slow down", nobody hammers it); the tokens of every attempt are counted.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import random
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import openai
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, ValidationError

from crashsafe.batch.items import Item
from crashsafe.batch.prompt import shown_id, system_prompt, user_prompt
from crashsafe.batch.task import BatchOutput, BatchTaskError, Usage, add_usage
from crashsafe.errors import ConfigError, EndpointError
from crashsafe.retry_after import retry_after_seconds
from crashsafe.store import masked
from crashsafe.text import without_secrets


class _Label(BaseModel):
    id: str
    label: str


class _Answer(BaseModel):
    labels: list[_Label]


NO_KEY = "not-set"
SAY_EVERY = 5.0  # seconds between two "retrying" lines
# Statuses after which no call can succeed: the job stops with what to check.
REFUSES_EVERYTHING = {
    401: "check OPENAI_API_KEY",
    403: "the key is not allowed to use this endpoint or model: check OPENAI_API_KEY",
    404: "check --base-url (it usually ends in /v1) and --model",
}  # what the CLI passes when OPENAI_API_KEY is not set
ERROR_BODY_SHOWN = 300  # characters of an endpoint's error kept in the dead letter


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` without ``secrets`` nor any bearer token, cut to a readable length: an
    endpoint's error body may echo the request's ``Authorization`` header, and it ends up
    in the dead letter and on the terminal."""
    text = without_secrets(text, secrets)
    return text if len(text) <= ERROR_BODY_SHOWN else text[:ERROR_BODY_SHOWN] + "..."


def check_key_transport(base_url: str, api_key: str) -> None:
    """Refuse to send a real API key in clear text: over plain http only to loopback."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not api_key or api_key == NO_KEY:
        return
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ConfigError(
            f"--base-url {base_url} is plain http: the API key would cross the network in "
            "clear text. Use https, a loopback address, or unset OPENAI_API_KEY for an "
            "endpoint that needs no key."
        )


class Cooldown:
    """A moment before which no call may start; any caller may push it later."""

    def __init__(self) -> None:
        self.until = 0.0

    def push(self, seconds: float) -> None:
        self.until = max(self.until, time.monotonic() + seconds)

    async def wait(self) -> None:
        while (delay := self.until - time.monotonic()) > 0:
            await asyncio.sleep(delay)


def validate(text: str, items: Sequence[Item], labels: Sequence[str]) -> list[dict[str, str]]:
    """The answer's labels in item order; ValueError says what is wrong with it."""
    try:
        answer = _Answer.model_validate_json(text)
    except ValidationError as exc:
        raise ValueError(f"not the JSON object asked for ({exc.errors()[0]['msg']})") from None
    got = {entry.id: entry.label for entry in answer.labels}
    # (an id the prompt showed quoted may come back as shown)
    found: dict[str, str] = {}
    for item in items:
        label = got.get(item.id, got.get(shown_id(item.id)))
        if label is not None:
            found[item.id] = label
    missing = [item.id for item in items if item.id not in found]
    if missing:
        raise ValueError(f"no label for id(s) {', '.join(map(repr, missing[:5]))}")
    unknown = sorted({label for label in got.values() if label not in labels})
    if unknown:
        raise ValueError(f"label(s) {', '.join(unknown)} not among {', '.join(labels)}")
    return [{"label": found[item.id]} for item in items]


class TaskBug(Exception):
    """A task's ``answers()`` failed otherwise than by saying the reply is invalid."""


class PromptTask:
    """An LLM task: ``await task(items)`` asks the model once per batch of items (a system
    prompt, then the items) and reads its answer into one result per item, re-asking
    when the answer is invalid. The same requests go through a provider's Batch API.

    Subclass it and define:

    - ``name``: the task's name, kept in the checkpoint's job line;
    - ``system_prompt()``: the instructions (their hash is kept too: another prompt is
      another job);
    - ``answers(text, items)``: one JSON-able result per item from the reply's text, in
      item order; raise ``ValueError`` saying what is wrong to have it asked again;
    - optionally ``user_prompt(items)`` (default: ``[id] text`` lines), ``json_mode``
      (default True: the reply is a JSON object) and ``job_fields()`` (more of what the
      answers depend on).

    ``crashsafe batch run --task file.py:MyTask --base-url ... --model ...`` makes it with
    the endpoint's options; ``--via batch-api`` sends it through the provider's Batch API.
    """

    name = "prompt"
    json_mode = True
    invalid_hint = "Reply again with only the JSON object, one entry per id."

    def system_prompt(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} needs a system_prompt()")

    def user_prompt(self, items: Sequence[Item]) -> str:
        return user_prompt(items)

    def answers(self, text: str, items: Sequence[Item]) -> list[Any]:
        """The results of ``items`` from a reply's text; ValueError says what is wrong."""
        raise NotImplementedError(f"{type(self).__name__} needs an answers(text, items)")

    def job_fields(self) -> dict[str, Any]:
        return {}

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str,
        max_reasks: int = 2,
        max_retries: int = 8,
        backoff_base: float = 1.0,
        timeout: float = 120.0,
    ) -> None:
        check_key_transport(base_url, api_key)
        self.base_url = masked(base_url)
        self.raw_base_url = base_url  # for another client of the same endpoint
        self._reached = False  # some call got an answer: connection errors are hiccups
        self._said = 0.0  # when the last retry line was written
        self.model = model
        self._secrets = [api_key]
        self.max_reasks = max_reasks
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.cooldown = Cooldown()
        self.client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, max_retries=0, timeout=timeout
        )

    def job(self) -> dict[str, Any]:
        """What the answers depend on, kept in the checkpoint: a rerun with another task,
        model or prompt (its text, hashed) would mix answers."""
        prompt = hashlib.sha256(self.system_prompt().encode()).hexdigest()[:12]
        return {"task": self.name, **self.job_fields(), "model": self.model, "prompt": prompt}

    async def _complete(self, messages: list[ChatCompletionMessageParam], usage: Usage) -> str:
        error = ""
        for attempt in range(self.max_retries + 1):
            await self.cooldown.wait()
            try:
                response = await self.client.chat.completions.create(**self._body(messages))
            except openai.APIStatusError as exc:
                message = redact(f"HTTP {exc.status_code}: {exc.message}", self._secrets)
                if exc.status_code in REFUSES_EVERYTHING:
                    hint = REFUSES_EVERYTHING[exc.status_code]
                    raise EndpointError(f"{self.base_url} answered {message}: {hint}") from None
                if exc.status_code != 429 and exc.status_code < 500:
                    raise BatchTaskError(message, usage=usage) from exc
                error = f"HTTP {exc.status_code}"
                wait = retry_after_seconds(exc.response.headers.get("retry-after"))
                delay = wait if wait is not None else self._backoff(attempt)
                self._say(f"{self.base_url} answered {error}; retrying in {delay:.1f} s")
                # One cooldown for everybody in flight: the endpoint is the shared resource.
                self.cooldown.push(delay)
                continue
            except openai.APITimeoutError:
                error = "timeout"
                self._say(f"{self.base_url} did not answer in time; retrying")
                await asyncio.sleep(self._backoff(attempt))
                continue
            except openai.APIConnectionError as exc:
                cause = exc.__cause__ or exc
                if not self._reached:
                    # Never reached at all: a wrong URL or a server that is not running,
                    # not a hiccup. Say so now, not after minutes of retries.
                    raise EndpointError(
                        f"cannot reach {self.base_url} ({type(cause).__name__}: {cause}): "
                        "check --base-url (or OPENAI_BASE_URL) and that the server runs"
                    ) from None
                error = f"connection error ({cause})"
                self._say(f"{self.base_url}: {error}; retrying")
                await asyncio.sleep(self._backoff(attempt))
                continue
            self._reached = True
            if response.usage is not None:
                add_usage(
                    usage,
                    {
                        "prompt_tokens": response.usage.prompt_tokens,
                        "completion_tokens": response.usage.completion_tokens,
                    },
                )
            add_usage(usage, {"calls": 1})
            return response.choices[0].message.content or ""
        raise BatchTaskError(f"{error} after {self.max_retries + 1} tries", usage=usage)

    def _say(self, line: str) -> None:
        """A retry line on stderr, at most one every few seconds."""
        now = time.monotonic()
        if now - self._said >= SAY_EVERY:
            self._said = now
            sys.stderr.write(line + "\n")

    async def aclose(self) -> None:
        await self.client.close()

    def _backoff(self, attempt: int) -> float:
        return float(self.backoff_base * 2**attempt * random.uniform(0.5, 1.5))

    def messages(self, items: Sequence[Item]) -> list[ChatCompletionMessageParam]:
        return [
            {"role": "system", "content": self.system_prompt()},
            {"role": "user", "content": self.user_prompt(items)},
        ]

    def _body(self, messages: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": 0}
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    def request_body(
        self, items: Sequence[Item], *, max_tokens: int | None = None
    ) -> dict[str, Any]:
        """The chat completion request for ``items``, as a provider's batch file holds it."""
        body = self._body(self.messages(items))
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return body

    async def __call__(self, items: list[Item]) -> BatchOutput:
        usage: Usage = {}
        messages = self.messages(items)
        problem = ""
        for _ in range(self.max_reasks + 1):
            text = await self._complete(messages, usage)
            try:
                return BatchOutput(self._answers(text, items), usage)
            except TaskBug as exc:  # not worth asking again: fail the batch, tokens counted
                raise BatchTaskError(str(exc), usage=usage) from exc
            except ValueError as exc:
                problem = str(exc)
                add_usage(usage, {"reasks": 1})
                messages += [
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": f"That answer is invalid: {problem}. {self.invalid_hint}",
                    },
                ]
        raise BatchTaskError(
            f"invalid output after {self.max_reasks + 1} asks: {problem}", usage=usage
        )

    def _answers(self, text: str, items: Sequence[Item]) -> list[Any]:
        """``answers()``, its own bugs told apart from an invalid reply (ValueError)."""
        try:
            return list(self.answers(text, items))
        except ValueError:
            raise
        except Exception as exc:
            raise TaskBug(f"{type(self).__name__}.answers() raised {type(exc).__name__}: "
                          f"{exc}") from exc  # fmt: skip


class Classifier(PromptTask):
    """``batch classify``: one ``{"label": ...}`` per item, among ``labels``."""

    name = "classify"

    def __init__(self, *, labels: Sequence[str], **endpoint: Any) -> None:
        self.labels = list(labels)
        super().__init__(**endpoint)

    def system_prompt(self) -> str:
        return system_prompt(self.labels)

    def answers(self, text: str, items: Sequence[Item]) -> list[dict[str, str]]:
        return validate(text, items, self.labels)

    def job_fields(self) -> dict[str, Any]:
        return {"labels": self.labels}
