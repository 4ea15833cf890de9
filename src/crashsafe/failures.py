"""The dead letter grouped by error: what `failed --group`, a crawl's summary and the
console show, and what the console's "Retry group" re-queues.

Failures group by their error's pattern: the last line (a traceback's is the exception)
without the excerpt of the response's body, its values put aside (URLs, quoted values
that are not names, long hexadecimal ids, numbers but an HTTP status), so that
``ValueError: could not convert string to float: '12,99'`` and the same for ``'n/a'``
are one group, and ``HTTP 500`` and ``HTTP 404`` are two. A group whose failures all
say the same shows that message; one whose values differ shows the pattern
(``could not convert string to float: '…'``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crashsafe.store import FailedUrl

_BODY = re.compile(r"; body: .*?(?= \(gave up after|$)")
_URL = re.compile(r"\bhttps?://[^\s'\"<>]+")
_QUOTED = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")  # ('price', 'utf-8': kept)
_HEX = re.compile(r"\b(?=[0-9a-f-]*\d)[0-9a-f]{8,}(?:-[0-9a-f]{4,})*\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<!HTTP )(?<![\w.])\d+(?:\.\d+)*(?![\w.]*\w)")


def short_error(error: str | None) -> str:
    """An error's last line (a traceback's is the exception), or ``-``, without the
    excerpt of a response's body (``; body: ...``), which differs from page to page."""
    lines = (error or "").strip().splitlines()
    if not lines:
        return "-"
    return _BODY.sub("", lines[-1])


def _quoted(match: re.Match[str]) -> str:
    value = match.group(1) if match.group(1) is not None else match.group(2)
    return match.group(0) if _NAME.fullmatch(value) else "'…'"


def error_pattern(short: str) -> str:
    """``short`` (a :func:`short_error`) with its values put aside; a pattern is its own
    pattern, so a group's label, message or pattern, finds the group again."""
    text = _URL.sub("<url>", short)
    text = _QUOTED.sub(_quoted, text)
    text = _HEX.sub("<id>", text)
    return _NUMBER.sub("N", text)


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    """Failures of one pattern; ``label`` is their message if they all say the same,
    else the pattern."""

    label: str
    failures: tuple[FailedUrl, ...]


def group_failures(rows: Sequence[FailedUrl]) -> list[ErrorGroup]:
    """The failures by error pattern, the largest group first (ties: first seen)."""
    groups: dict[str, list[FailedUrl]] = {}
    messages: dict[str, set[str]] = {}
    for row in rows:
        short = short_error(row.error)
        key = error_pattern(short)
        groups.setdefault(key, []).append(row)
        messages.setdefault(key, set()).add(short)
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))
    return [
        ErrorGroup(next(iter(messages[key])) if len(messages[key]) == 1 else key, tuple(group))
        for key, group in ranked
    ]


def in_group(row: FailedUrl, label: str) -> bool:
    """Whether ``row`` belongs to the group shown as ``label``."""
    return error_pattern(short_error(row.error)) == error_pattern(label)
