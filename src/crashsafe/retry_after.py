"""The ``Retry-After`` header (RFC 9110 §10.2.3), read the same way by the crawl, the LLM
batch client and the webhook dispatcher."""

from __future__ import annotations

import time
from datetime import UTC
from email.utils import parsedate_to_datetime

#: A wait further away than this (a day) is read as this: no server holds us back longer.
MAX_RETRY_AFTER = 86400.0


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait from ``now`` (default: the clock),
    clamped to ``[0, MAX_RETRY_AFTER]``; None if it is absent or neither form.

    Both forms: ``delay-seconds`` (``"120"``) and an HTTP-date (the IMF-fixdate and the two
    obsolete forms recipients must accept, §5.6.7; one without a zone is GMT).
    """
    text = (value or "").strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():  # ("²".isdigit() is True too)
        seconds = float(text)  # (a thousand digits is inf: the cap)
    else:
        try:
            when = parsedate_to_datetime(text)
            if when.tzinfo is None:  # the asctime form carries no zone; HTTP dates are GMT
                when = when.replace(tzinfo=UTC)
            seconds = when.timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, OverflowError, IndexError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)
