"""The user's batch task: ``module:function`` or ``path.py:function``.

A task takes a list of :class:`~crashsafe.batch.items.Item` and returns one JSON-able
result per item, in order, either as a list or as a :class:`BatchOutput` that also
carries token usage. It may be sync (run on a thread) or async.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from crashsafe.batch.items import Item
from crashsafe.errors import ConfigError
from crashsafe.loading import import_target

Usage = dict[str, int]
Task = Callable[[list[Item]], Any]


@dataclass(frozen=True, slots=True)
class BatchOutput:
    """A task's answer: ``results`` (one per item) and ``usage`` (e.g. token counts)."""

    results: Sequence[Any]
    usage: Usage = field(default_factory=dict)


class BatchTaskError(Exception):
    """A task failure that still cost something: ``usage`` is added to the totals."""

    def __init__(self, message: str, *, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.usage = usage or {}


def load_task(target: str) -> Task:
    where, sep, name = target.partition(":")
    if not sep or not name:
        raise ConfigError(f"--task {target!r}: use module:function or path/file.py:function")
    module = import_target(where)
    task = getattr(module, name, None)
    if not callable(task):
        raise ConfigError(f"{where} has no function or class {name!r}")
    return task  # type: ignore[no-any-return]


def add_usage(total: Usage, more: Usage) -> None:
    """Add ``more``'s counts to ``total``; what is not a finite number is not a count."""
    for key, value in more.items():
        if isinstance(value, int | float) and math.isfinite(value):
            total[key] = total.get(key, 0) + int(value)


class TaskCaller:
    """Calls a sync or async task and checks its answer."""

    def __init__(self, task: Task, *, threads: int) -> None:
        self.task = task
        self.is_async = inspect.iscoroutinefunction(task) or inspect.iscoroutinefunction(
            getattr(task, "__call__", None)  # noqa: B004 - callable objects with async __call__
        )
        self._pool = None if self.is_async else ThreadPoolExecutor(threads, "crashsafe-task")

    async def __call__(self, items: list[Item]) -> BatchOutput:
        if self._pool is None:
            answer = await self.task(items)
        else:
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(self._pool, functools.partial(self.task, items))
            if inspect.isawaitable(answer):
                answer = await answer
        output = answer if isinstance(answer, BatchOutput) else BatchOutput(list(answer))
        if len(output.results) != len(items):
            raise BatchTaskError(
                f"task returned {len(output.results)} results for {len(items)} items",
                usage=output.usage,
            )
        return output

    async def aclose(self) -> None:
        """Release the task's resources: its threads, and its own ``aclose()`` if any."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        closer = getattr(self.task, "aclose", None)
        if closer is not None:
            await closer()
