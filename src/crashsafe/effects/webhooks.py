"""Webhooks in the Standard Webhooks format: signing, ids, bodies, retries, and a receiver.

The outbox holds one event per (record id, version); ``crashsafe deliver`` POSTs each one
as https://www.standardwebhooks.com/ (spec 1.0.0) describes. Here are the pieces that need
neither the crawl database nor an HTTP client: :class:`Signer` (the ``webhook-*`` headers);
:func:`event_id` and :func:`event_body` (the same id and bytes on every retry, from any
dispatcher); :class:`RetrySchedule`, :func:`parse_retry_after` and :func:`classify` (what
to do after an attempt). The receiving side is ``effects/receiver.py``.

Signing and verifying go through the ``standardwebhooks`` package (the reference
implementation), so any Standard Webhooks library accepts what we send. Its quirks stay in
here: it decodes a secret leniently (characters outside base64 are dropped: a mistyped
secret silently becomes another key), raises bare ``ValueError`` on a malformed signature
header, and signs a timezone-aware datetime as if it were UTC.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import re
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from standardwebhooks.webhooks import Webhook

from crashsafe.durations import seconds
from crashsafe.errors import ConfigError
from crashsafe.retry_after import MAX_RETRY_AFTER, retry_after_seconds

__all__ = [
    "EVENT_KINDS",
    "MAKE_SECRET",
    "MAX_RETRY_AFTER",
    "SPEC_DELAYS",
    "RetrySchedule",
    "Signer",
    "classify",
    "event_body",
    "event_id",
    "new_secret",
    "parse_retry_after",
]

EVENT_KINDS = ("record.created", "record.updated", "record.gone")
#: A shell command that prints a new secret (what :func:`new_secret` returns).
MAKE_SECRET = (
    "python -c \"import base64,os;print('whsec_'+base64.b64encode(os.urandom(24)).decode())\""
)
#: Waits after failed attempts 1, 2, …: the spec's example schedule (5 s, 5 min, 30 min,
#: 2 h, 5 h, 10 h, 14 h, 20 h, 24 h; its first row, "immediately", is the first attempt).
#: Ten attempts over about three days.
SPEC_DELAYS: tuple[float, ...] = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)

_SECRET_PREFIX = "whsec_"
_MIN_SECRET_BYTES = 24  # the spec: "At least 24 bytes (192 bits, 512 maximum)"
# The spec asks that ids hold no "." (the signed text is "{id}.{timestamp}.{body}"), and a
# header value must hold no line break.
_MSG_ID = re.compile(r"[A-Za-z0-9_-]{1,256}")


def new_secret() -> str:
    """Return a new endpoint secret: ``whsec_`` + base64 of 24 random bytes."""
    return _SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def webhook_for(secret: str) -> Webhook:
    """The package's :class:`Webhook` for ``secret``, checked strictly first (the package
    would raise ``binascii.Error`` or ``EmptyWebhookSecretError``, or silently drop
    characters) with errors that never quote the secret; it is handed the key bytes."""
    fix = f"make one with: {MAKE_SECRET}"
    if not secret.startswith(_SECRET_PREFIX):
        raise ConfigError(f"the webhook secret does not start with 'whsec_'; {fix}")
    text = secret[len(_SECRET_PREFIX) :]
    try:  # padding is optional, as in the reference implementations
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:  # binascii.Error, or non-ASCII text
        raise ConfigError(
            f"the webhook secret is not base64 (A-Z a-z 0-9 + /) after 'whsec_'; {fix}"
        ) from None
    if len(key) < _MIN_SECRET_BYTES:
        raise ConfigError(
            f"the webhook secret holds {len(key)} bytes; the Standard Webhooks spec asks for "
            f"at least {_MIN_SECRET_BYTES} random bytes; {fix}"
        )
    return Webhook(key)


class Signer:
    """Signs webhook bodies with one endpoint's secret.

    Args:
        secret: ``whsec_`` followed by base64 of at least 24 random bytes.

    Raises:
        ConfigError: the secret is not in that form.
    """

    def __init__(self, secret: str) -> None:
        self._webhook = webhook_for(secret)

    def headers(self, msg_id: str, body: bytes, now: float) -> dict[str, str]:
        """Return the headers of one attempt to deliver ``body`` (UTF-8 JSON) at ``now``.

        A retry calls this again with its own ``now``: the timestamp is the attempt's, so a
        receiver can refuse replays, while ``msg_id`` and ``body`` stay the same.

        Raises:
            ValueError: ``msg_id`` holds characters other than ``A-Z a-z 0-9 _ -``.
        """
        if not _MSG_ID.fullmatch(msg_id):
            raise ValueError(f"webhook id {msg_id!r} must be 1-256 of A-Z a-z 0-9 _ -")
        seconds = math.floor(now)
        # A whole second in UTC: the package replaces the zone of what it is given with UTC
        # and floors it; flooring a float first could round up to the next second.
        at = datetime.fromtimestamp(seconds, tz=UTC)
        return {
            "content-type": "application/json",
            "webhook-id": msg_id,
            "webhook-timestamp": str(seconds),
            "webhook-signature": self._webhook.sign(msg_id, at, body.decode()),
        }


def event_id(crawl: str, record_id: str, version: int, kind: str) -> str:
    """Return the webhook id of an outbox event: the receiver's idempotency key.

    ``msg_`` + the first 26 characters (130 bits) of the lower-case base32 of SHA-256 of
    the JSON array ``[crawl, record_id, version, kind]``. It depends on nothing else, so
    every retry and every dispatcher (any version) sends the same id for the same event.
    """
    digest = hashlib.sha256(orjson.dumps([crawl, record_id, version, kind])).digest()
    return "msg_" + base64.b32encode(digest).decode().lower()[:26]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event_body(
    *,
    kind: str,
    crawl: str,
    record_id: str,
    version: int,
    url: str | None,
    data: Any,
    written_at: float,
    gone_at: float | None = None,
) -> bytes:
    """Return the JSON body of an outbox event, the same bytes on every retry.

    The spec's recommended shape: ``{"type", "timestamp", "data": {"crawl", "id",
    "version", "url", "data", "gone_at"}}`` with sorted keys and no spaces. ``timestamp``
    is ``written_at`` (when the event was written, ISO 8601 UTC), never the time of sending.

    Raises:
        ValueError: ``kind`` is not one of :data:`EVENT_KINDS`.
    """
    if kind not in EVENT_KINDS:
        raise ValueError(f"event kind {kind!r} is not one of {', '.join(EVENT_KINDS)}")
    record = {
        "crawl": crawl,
        "id": record_id,
        "version": version,
        "url": url,
        "data": data,
        "gone_at": None if gone_at is None else _iso(gone_at),
    }
    payload = {"type": kind, "timestamp": _iso(written_at), "data": record}
    try:
        return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        # What orjson refuses and JSON can say: integers beyond 64 bits, nesting deeper
        # than 254, lone surrogates. The same bytes on every
        # attempt all the same: sorted keys, no spaces.
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        try:
            return text.encode()
        except UnicodeEncodeError:  # lone surrogates, which UTF-8 cannot carry: escaped
            return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class RetrySchedule:
    """How long to wait after each failed attempt before the next one.

    Attributes:
        delays: seconds to wait after failed attempt 1, 2, …; after the last the delivery
            has failed. So ``len(delays) + 1`` attempts in all.
        jitter: each wait is moved by up to this fraction either way, so that endpoints
            that failed together are not all retried in the same second.
        rng: the source of the jitter (seed it in tests).
    """

    delays: tuple[float, ...] = SPEC_DELAYS
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def __post_init__(self) -> None:
        delays = tuple(float(d) for d in self.delays)
        if not all(math.isfinite(d) and d >= 0 for d in delays):
            raise ConfigError("retry delays must be finite and not negative")
        if not 0 <= self.jitter < 1:
            raise ConfigError(f"retry jitter {self.jitter} must be from 0 up to (not) 1")
        object.__setattr__(self, "delays", delays)

    @classmethod
    def parse(
        cls, text: str, *, jitter: float = 0.2, rng: random.Random | None = None
    ) -> RetrySchedule:
        """Build a schedule from comma-separated delays: ``"0.1,0.5,2"`` or ``"5s,5m,2h"``.

        Raises:
            ConfigError: a part is not a number of seconds, minutes (m) or hours (h).
        """
        delays = []
        for part in text.split(","):
            delay = seconds(part)
            if delay is None:
                raise ConfigError(
                    f"retry schedule {text!r}: {part.strip()!r} is not a delay; give "
                    "comma-separated seconds, or numbers ending in s, m or h: '5s,5m,30m,2h'"
                )
            delays.append(delay)
        return cls(tuple(delays), jitter, rng if rng is not None else random.Random())

    @property
    def attempts(self) -> int:
        """How many attempts a delivery gets before it has failed."""
        return len(self.delays) + 1

    def delay(self, attempt: int, *, retry_after: float | None = None) -> float | None:
        """Return the seconds to wait after failed attempt ``attempt`` (1 = the first).

        ``retry_after`` (from :func:`parse_retry_after`) lengthens the wait, but earns no
        attempt beyond the schedule. ``None`` means that was the last attempt: the delivery
        has failed.
        """
        if attempt < 1:
            raise ValueError(f"attempt {attempt} must be 1 or more")
        if attempt > len(self.delays):
            return None
        wait = self.delays[attempt - 1] * (1 + self.rng.uniform(-self.jitter, self.jitter))
        return wait if retry_after is None else max(wait, retry_after)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """The seconds a ``Retry-After`` header asks to wait from ``now``, at most
    :data:`MAX_RETRY_AFTER` (:func:`crashsafe.retry_after.retry_after_seconds`)."""
    return retry_after_seconds(value, now=now)


def classify(status: int | None) -> Literal["delivered", "disable", "retry"]:
    """Return what an attempt's HTTP status means for the delivery.

    ``2xx`` is ``"delivered"``. ``410 Gone`` is ``"disable"``: the spec's sign that the
    endpoint wants no more webhooks, so it is disabled. Everything else is ``"retry"``
    until the :class:`RetrySchedule` runs out: ``None`` (no response: connection refused,
    timeout), ``3xx`` (redirects are not followed: fix the URL), ``429``, ``5xx`` and the
    other ``4xx`` alike; no other status is taken as a permanent failure, because a
    receiver's 400 or 401 is most often a deploy or a secret being rotated.
    """
    if status is not None and 200 <= status <= 299:
        return "delivered"
    if status == 410:
        return "disable"
    return "retry"
