"""The dead letter grouped by error: what `failed --group`, a crawl's summary and the
console show, and what the console's "Retry group" re-queues.

Failures group by their error's pattern: the last line that says something (a
traceback's is the exception; pydantic's, the field and what is wrong with it) without
the excerpt of the response's body, with its values put aside: URLs as ``<url>``,
numbers (but an HTTP status; dates, addresses, ``2.5s`` and ``-3`` are numbers too) as
``N``, hexadecimal ids as ``<id>``, and quoted values as ``'…'``, except in the errors
whose quotes hold names (``KeyError: 'price'``, ``AttributeError``, ``TypeError``...).
So ``ValueError: could not convert string to float: '12,99'`` and the same for ``'TBD'``
are one group, while ``HTTP 500`` and ``HTTP 404``, or ``KeyError: 'price'`` and
``KeyError: 'name'``, are two. A group whose failures all say the same shows that
message, else its pattern; either way the group is found again by its key (the
pattern), never by re-reading what it shows.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from crashsafe.store import FailedUrl

_BODY = re.compile(r"; body: .*?(?= \(gave up after|$)")
# A line of an exception group's frame ("+---- 1 ----", "| ...", "and 3 more exceptions").
_DECORATION = re.compile(r"[\s|+\-.]*|[\s|]*and \d+ more exceptions?\s*")
# pydantic's ValidationError ends "For further information visit <url>"; the two lines
# above say the field and what is wrong, with the input, which differs from item to item.
_PYDANTIC_END = re.compile(r"\s*For further information visit ")
_PYDANTIC_INPUT = re.compile(r"input_value=.*?, input_type=")
_GROUP_PREFIX = re.compile(r"^[\s|]*")
# A traceback's exception line: a class name (dotted or not) as exceptions are named.
_EXCEPTION = re.compile(
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Warning|Exit|Interrupt|Iteration"
    r"|Failure|Group)(?::\s|:?$)"
)
# A line that only points elsewhere ("For more information check: <url>", SQLAlchemy's
# "(Background on this error at: <url>)"): the line above says what went wrong.
_POINTS = re.compile(r"(?i)information|background|\bsee\b|\bdocs?\b|details")
# A quoted HTTP status with its reason ('404 Not Found'): kept, as HTTP 404 is.
_STATUS_TEXT = re.compile(r"[bB]?['\"]\d{3}(?: [A-Za-z' -]{1,40})?['\"]")
LINE_MAX = 1000  # characters of the line an error is grouped by (the rest: its tail)
# Errors whose quoted values are names (a key, an attribute, a module, a type), kept.
_NAMING = frozenset({
    "KeyError", "AttributeError", "NameError", "UnboundLocalError", "ImportError",
    "ModuleNotFoundError", "LookupError", "TypeError",
})  # fmt: skip
_KIND = re.compile(r"([A-Za-z_][\w.]*):")
# One pass, left to right, so that a value kept (a quoted name) is not taken apart by
# another rule. Every part is linear: no nested repetition can backtrack far.
_VALUES = re.compile(
    r"(?<!\w)(?P<quoted>[bB]?(?:'[^'\n]*'|\"[^\"\n]*\"))(?!\w)"
    r"|(?P<url>\bhttps?://[^\s'\"<>()]+)"
    r"|(?P<status>\bHTTP \d{3}\b)"
    r"|(?<![\w.-])(?P<hex>(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{8,}(?:-[0-9a-f]{4,})*)(?![\w-])"
    r"|(?<![\w.-])(?P<number>0x[0-9a-f]+|-?\d+(?:[.:-]\d+)*)(?P<unit>[a-z]{1,3}|%)?(?!\w)",
    re.IGNORECASE,
)


def short_error(error: str | None) -> str:
    """The line an error is grouped by, or ``-``: a traceback's exception line (not the
    notes or the message's later lines after it), pydantic's field and what is wrong
    with it, else the last line that says something (not an exception group's frame, not
    a line that only points to a URL); without the excerpt of a response's body
    (``; body: ...``), which differs from page to page; at most ``LINE_MAX`` characters."""
    text = (error or "").strip()
    lines = [line[:LINE_MAX] for line in text.splitlines()]
    if len(lines) >= 3 and _PYDANTIC_END.match(lines[-1]):
        field, wrong = lines[-3].strip(), lines[-2].strip()
        return f"{field}: {_PYDANTIC_INPUT.sub('input_type=', wrong)}"
    if "Traceback (most recent call last):" in text:
        for line in reversed(lines):
            if _EXCEPTION.match(line):
                return _BODY.sub("", line)
    for line in reversed(lines):
        if not _DECORATION.fullmatch(line) and not _points_away(line):
            return _BODY.sub("", _GROUP_PREFIX.sub("", line, count=1))
    return "-"


def _points_away(line: str) -> bool:
    """Whether ``line`` only points to a URL ("For more information check: <url>")."""
    text = line.strip().strip("()")
    at = text.find("http")
    return 0 <= at <= 60 and " " not in text[at:] and _POINTS.search(text[:at]) is not None


def error_pattern(short: str) -> str:
    """The key ``short`` (a :func:`short_error`) groups by: its values put aside."""
    kind = _KIND.match(short)
    names = kind is not None and kind.group(1).rsplit(".", 1)[-1] in _NAMING

    def put_aside(match: re.Match[str]) -> str:
        if match.group("quoted") is not None:
            kept = names or _STATUS_TEXT.fullmatch(match.group(0))
            return match.group(0) if kept else "'…'"
        if match.group("status") is not None:
            return match.group(0)
        if match.group("url") is not None:
            return "<url>"
        if match.group("hex") is not None:
            return "<id>"
        return "N" + (match.group("unit") or "")

    return _VALUES.sub(put_aside, short)


def error_key(error: str | None) -> str:
    """The key of the group a stored error belongs to."""
    return _short_and_key(error)[1]


@dataclass(frozen=True, slots=True)
class ErrorGroup:
    """Failures of one key; ``label`` is their message if they all say the same, else
    the key (the pattern)."""

    key: str
    label: str
    failures: tuple[FailedUrl, ...]


def _short_and_key(error: str | None) -> tuple[str, str]:
    """(its short form, its key): a dead letter repeats a few errors many times, and
    reading one costs a quarter of a millisecond (remembered for errors of up to 4 KB:
    tracebacks kept whole would hold megabytes)."""
    if error is not None and len(error) > 4096:
        return _read(error)
    return _remembered(error)


def _read(error: str | None) -> tuple[str, str]:
    short = short_error(error)
    return short, error_pattern(short)


_remembered = functools.lru_cache(maxsize=4096)(_read)


def group_failures(rows: Sequence[FailedUrl]) -> list[ErrorGroup]:
    """The failures by error key, the largest group first (ties: first seen)."""
    groups: dict[str, list[FailedUrl]] = {}
    labels: dict[str, str] = {}  # the group's one message, or its key once two differ
    for row in rows:
        short, key = _short_and_key(row.error)
        groups.setdefault(key, []).append(row)
        if labels.setdefault(key, short) != short:
            labels[key] = key
    ranked = sorted(groups.items(), key=lambda item: -len(item[1]))
    return [ErrorGroup(key, labels[key], tuple(g)) for key, g in ranked]
