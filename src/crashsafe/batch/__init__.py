"""Resumable batch jobs: a fixed input, a task per batch, an append-only JSONL checkpoint.

``PromptTask`` is the base of an LLM task of your own (``batch run --task``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crashsafe.batch.llm import PromptTask

__all__ = ["PromptTask"]


def __getattr__(name: str) -> Any:  # the openai client loads only when a task needs it
    if name == "PromptTask":
        from crashsafe.batch.llm import PromptTask

        return PromptTask
    raise AttributeError(name)
