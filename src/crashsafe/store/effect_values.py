"""The values of recrawls, files and the outbox that cross the Store protocol
(``store/sql_effects.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from crashsafe.store.values import pickled_as_tuple


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class FileRow:
    """A file a page downloaded, stored under its SHA-256 (``effects/files.py``); its row
    is written with the page's records, which refer to it."""

    sha256: str
    size: int
    content_type: str | None
    url: str


@dataclass(frozen=True, slots=True)
class Pass:
    """A recrawl begun: pass ``number`` (the first crawl is pass 1), with ``requeued``
    done URLs put back to pending (0: none was old enough, and no pass began)."""

    number: int
    requeued: int
    open: bool = False  # none began: pass ``number`` still has pages pending or leased


@dataclass(frozen=True, slots=True)
class EffectStats:
    """A crawl's passes, record versions, files and outbox, computed from rows.

    ``changed_last_pass`` counts records first seen before the last pass began that
    changed (or went) since; ``deliveries`` maps a delivery state (``pending``,
    ``leased``, ``delivered``, ``failed``) to its count over every endpoint.
    ``retired`` counts the pages passes leave out (gone at their last three visits).
    """

    crawl: str
    passes: int = 1
    last_pass_at: float | None = None
    versions: int = 0
    records_changed: int = 0
    gone: int = 0
    changed_last_pass: int = 0
    files: int = 0
    file_bytes: int = 0
    events: int = 0
    deliveries: dict[str, int] = field(default_factory=dict)
    #: pages retired from passes: gone (404, 410) at their last three visits
    retired: int = 0


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A webhook a crawl's events are delivered to; ``disabled_at`` set once it answered
    410 Gone."""

    id: int
    crawl: str
    url: str
    disabled_at: float | None
    disabled_why: str | None


@dataclass(frozen=True, slots=True)
class Delivery:
    """An outbox event leased for delivery to one endpoint. ``attempts`` counts the
    leases granted since it was last queued (a replay starts again at 0), this one
    included: the retry schedule's step."""

    endpoint: int
    event: int
    attempts: int
    crawl: str
    record_id: str
    version: int
    type: str
    url: str | None
    data: str  # the record's data as JSON text, as that version had it
    at: float  # when the event was written (the record changed)
    lease: int = 0  # the delivery's leases so far, never reset: fences the answer


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """What became of one leased delivery: ``delivered``, ``retry`` (after
    ``retry_in`` seconds) or ``failed`` (the retry schedule is spent)."""

    delivery: Delivery
    kind: Literal["delivered", "retry", "failed"]
    status: int | None = None
    error: str | None = None
    retry_in: float = 0.0


@dataclass(frozen=True, slots=True)
class FailedDelivery:
    """A delivery that gave up after ``attempts`` leases, last with ``status``/``error``."""

    endpoint_url: str
    crawl: str
    record_id: str
    version: int
    type: str
    attempts: int
    status: int | None
    error: str | None
    failed_at: float | None


@dataclass(frozen=True, slots=True)
class HighWater:
    """The last lease grant id and the time at one moment, for the run ``run`` (a
    command's id, which its workers' owner ids start with): a run's own figures are what
    its workers did after (``Store.since``)."""

    grants: int
    at: float
    run: str = ""


@dataclass(frozen=True, slots=True)
class RunFigures:
    """What a run did: requests made, and records by what became of them
    (``record.created``, ``record.updated``, ``record.gone``, as the outbox names them)."""

    requests: int
    events: dict[str, int]


@dataclass(frozen=True, slots=True)
class PassTurn:
    """What :meth:`begin_pass` found: the current pass still ``open`` (pages pending or
    leased: crawl them), or it is complete and pass ``started`` has begun (``late``
    seconds after its schedule: ``overran`` of them the last pass's, the rest no worker's),
    or none may begin for ``wait``
    seconds (None: no page will ever be due)."""

    open: bool = False
    started: Pass | None = None
    wait: float | None = None
    late: float = 0.0
    number: int = 1  # the crawl's current pass (the one begun, if one was)
    ended: bool = False  # the caller's last pass is complete: none began
    overran: float = 0.0  # seconds the pass before the one begun ran past ``every``


@dataclass(frozen=True, slots=True)
class PassFigures:
    """What one complete pass did: its fetches (pages with an answer), of them the 304s
    to their validators and the bodies unchanged (neither parsed), the body bytes
    downloaded, and the records it created, changed and left gone."""

    number: int
    started_at: float
    finished_at: float
    fetched: int
    not_modified: int
    unchanged: int
    body_bytes: int
    created: int
    changed: int
    gone: int

    @property
    def parsed(self) -> int:
        return self.fetched - self.not_modified - self.unchanged


@dataclass(frozen=True, slots=True)
class Pruned:
    """What pruning the outbox removed: events, and their delivered deliveries."""

    events: int
    deliveries: int
