"""The options of an LLM job (``batch classify``, ``batch run`` with a PromptTask): its
endpoint, its prices and caps, and how it is sent (synchronously or through a
provider's Batch API)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import click

from crashsafe.errors import ConfigError

if TYPE_CHECKING:
    from crashsafe.batch.batchapi.runner import BatchApiOptions

F = TypeVar("F", bound=Callable[..., Any])
PROVIDER_LIMITS = {"openai": (50_000, 200), "anthropic": (100_000, 256)}  # requests, MB


def llm_env(base_url: str | None, model: str | None) -> tuple[str, str, str]:
    url = base_url or os.environ.get("CRASHSAFE_LLM_BASE_URL") or os.environ.get("OPENAI_BASE_URL")
    if not url:
        raise ConfigError(
            "no endpoint: pass --base-url (any OpenAI-compatible /v1 URL) or set "
            "OPENAI_BASE_URL; `crashsafe batch llm-server` runs a local one for trying"
        )
    chosen = model or os.environ.get("CRASHSAFE_LLM_MODEL") or "gpt-4o-mini"
    from crashsafe.batch.llm import NO_KEY

    key = os.environ.get("OPENAI_API_KEY") or NO_KEY
    return url, chosen, key


def llm_options(f: F) -> F:
    options = [
        click.option("--base-url", help="OpenAI-compatible endpoint (env OPENAI_BASE_URL)."),
        click.option("--model",
                     help="Model name (env CRASHSAFE_LLM_MODEL; default gpt-4o-mini)."),
        click.option("--price-in", type=float, default=0.0, help="Price per 1M prompt tokens."),
        click.option("--price-out", type=float, default=0.0,
                     help="Price per 1M completion tokens."),
        click.option("--max-spend", type=float,
                     help="Stop scheduling before this run could spend more than this (per "
                     "run: a rerun starts from 0)."),
        click.option("--max-spend-total", type=float,
                     help="The same for the whole job: what earlier runs spent (kept in the "
                     "checkpoint) counts too, so a crash loop cannot reset it."),
        click.option("--via", type=click.Choice(["sync", "batch-api", "auto"]), default="sync",
                     show_default=True,
                     help="batch-api: through the provider's Batch API, at its batch prices "
                     "(OpenAI: half), answers within 24 h; a killed run resumes without "
                     "submitting twice. auto: the same, but fewer than --finish-sync-below "
                     "items left are asked synchronously."),
        click.option("--finish-sync-below", type=click.IntRange(0), metavar="N",
                     help="With the Batch API: once fewer than N items are left to ask and "
                     "no batch runs (a small job, failed lines, an expired batch's "
                     "leftovers), ask them synchronously at full price (default: 100 with "
                     "--via auto, else 0)."),
        click.option("--provider", type=click.Choice(["openai", "anthropic"]),
                     default="openai", show_default=True,
                     help="Whose Batch API: openai (Files and Batches) or anthropic "
                     "(Message Batches: crashsafe[anthropic], key from ANTHROPIC_API_KEY, "
                     "--base-url https://api.anthropic.com/v1)."),
        click.option("--poll-seconds", type=click.FloatRange(min=0.01), default=30.0,
                     show_default=True, help="First wait between two looks at the batches "
                     "(it grows to 300 s while nothing changes)."),
        click.option("--chunk-requests", type=click.IntRange(1), metavar="N",
                     help="Requests per provider batch at most (default: the provider's "
                     "limit, OpenAI 50 000, Anthropic 100 000)."),
        click.option("--chunk-mb", type=click.FloatRange(min=0, min_open=True), metavar="MB",
                     help="A provider batch's size at most, in MB (default: the provider's "
                     "limit, OpenAI 200, Anthropic 256)."),
        click.option("--batch-discount", type=click.FloatRange(0, 1), default=0.5,
                     show_default=True,
                     help="Batch prices as a share of --price-in/--price-out."),
    ]  # fmt: skip
    for option in reversed(options):
        f = option(f)
    return f


@dataclass(frozen=True, slots=True)
class LLMOptions:
    """What ``llm_options`` gave, but the prices and caps (they stay with the run's)."""

    base_url: str | None
    model: str | None
    via: str
    provider: str
    finish_sync_below: int | None
    poll_seconds: float
    chunk_requests: int | None
    chunk_mb: float | None
    batch_discount: float

    def given(self) -> dict[str, bool]:
        """Which options were set, by their names on the command line."""
        return {
            "--base-url": self.base_url is not None, "--model": self.model is not None,
            "--via": self.via != "sync", "--provider": self.provider != "openai",
            "--finish-sync-below": self.finish_sync_below is not None,
            "--chunk-requests": self.chunk_requests is not None,
            "--chunk-mb": self.chunk_mb is not None,
            "--poll-seconds": self.poll_seconds != 30.0,
            "--batch-discount": self.batch_discount != 0.5,
        }  # fmt: skip

    def batch_api(self, url: str, key: str) -> BatchApiOptions | None:
        """How the job goes through a Batch API; None: synchronously."""
        if self.via == "sync":
            if self.finish_sync_below is not None:
                raise ConfigError("--finish-sync-below: only with --via batch-api or --via auto")
            return None
        if self.provider == "anthropic":
            from crashsafe.batch.batchapi.anthropic_provider import anthropic_client

            anthropic_client(url, key)  # the package is there, or say how to get it
        from crashsafe.batch.batchapi.runner import BatchApiOptions

        below = self.finish_sync_below
        if below is None:
            below = 100 if self.via == "auto" else 0
        most_requests, most_mb = PROVIDER_LIMITS[self.provider]
        return BatchApiOptions(
            poll_seconds=self.poll_seconds, chunk_requests=self.chunk_requests or most_requests,
            chunk_bytes=int((self.chunk_mb or most_mb) * 10**6), discount=self.batch_discount,
            finish_sync_below=below, provider=self.provider,
            api_key=os.environ.get("ANTHROPIC_API_KEY", "") if self.provider == "anthropic"
            else "",
        )  # fmt: skip


def pop_llm_options(opts: dict[str, Any]) -> LLMOptions:
    """Take ``llm_options``' own options out of a command's ``opts``."""
    return LLMOptions(**{name: opts.pop(name) for name in LLMOptions.__slots__})
