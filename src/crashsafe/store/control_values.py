"""What steering a crawl stores: its pause, its paused origins, a worker told to stop, and
the audit trail of every action taken from outside (``store/sql_control.py``)."""

from __future__ import annotations

from dataclasses import dataclass

#: Seconds a paused origin's pending URLs are moved ahead (about 3 170 years), and the
#: time from which a URL counts as moved (no backoff comes near it; a PostgreSQL time
#: this far ahead still reads back as a Python datetime).
PAUSE_SHIFT = 1e11
PAUSE_SHIFTED = 5e10


@dataclass(frozen=True, slots=True)
class PausedOrigin:
    origin: str
    since: float
    by: str


@dataclass(frozen=True, slots=True)
class Control:
    """How a crawl is steered now. ``stop_asked_by`` is for the worker that asked: who
    cancelled its run (None: nobody)."""

    crawl: str
    paused_since: float | None = None
    paused_by: str | None = None
    origins: tuple[PausedOrigin, ...] = ()
    stop_asked_by: str | None = None

    @property
    def paused(self) -> bool:
        return self.paused_since is not None


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One action taken on a crawl from outside: ``pause``, ``resume``, ``cancel``,
    ``retry``; ``target`` an origin (or None: the whole crawl)."""

    id: int
    crawl: str
    action: str
    target: str | None
    actor: str
    at: float
    detail: str | None
