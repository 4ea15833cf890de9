"""The values that cross the Store protocol, and the text rules every backend follows.

Values that travel between a crawl and its store process are slotted dataclasses that
pickle as tuples (``pickled_as_tuple``).
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson

if TYPE_CHECKING:
    from crashsafe.store.effect_values import FileRow

Outcome = Literal["done", "retry", "failed", "skipped", "deferred"]
#: The names crashsafe's own fields take in exports (``_crashsafe_key``...): an item may
#: have no field of its own that starts so (the crawl refuses it, naming it).
META_PREFIX = "_crashsafe_"
C = TypeVar("C", bound=type)


def pickled_as_tuple(cls: C) -> C:
    """Pickle a slotted dataclass as ``cls(*fields)``: the default goes through
    ``dataclasses.fields`` for every object, which was 4 % of a crawl's CPU (these values
    cross to the store process and back for every page)."""
    names = [f.name for f in fields(cls)]
    values = operator.attrgetter(*names)

    def __reduce__(self: Any) -> tuple[type, tuple[Any, ...]]:
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[assignment]
    return cls


#: What ``commit_pages`` answers for a page whose lease is no longer the current grant of
#: its URL (it lapsed, and was or may be granted again): nothing of the page was written.
STALE = "refused: the lease is no longer this worker's (it lapsed; stale commit)"


def canonical_json(data: Any) -> str:
    """Serialise ``data`` so equal content always gives equal text (and hash).

    NaN and the infinities are refused (``ValueError``): JSON cannot carry them.
    """
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


# What json.dumps(data, **options) makes per call, made once: a record's JSON is encoded
# on every page.
_SORTED = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_AS_GIVEN = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def exact_json(data: Any, *, sort_keys: bool = True) -> str:
    """``data`` as JSON that every backend stores and gives back exactly: UTF-8 where it
    can be (the common case), else ASCII with ``\\uXXXX`` escapes, which carry what UTF-8
    cannot (lone surrogates); NUL is always the escape ``\\u0000``. Raises ``ValueError``
    for NaN and the infinities, ``TypeError`` for what JSON cannot carry."""
    text = (_SORTED if sort_keys else _AS_GIVEN).encode(data)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return json.dumps(data, sort_keys=sort_keys, separators=(",", ":"), allow_nan=False)
    return text


def _as_given(data: dict[Any, Any]) -> str:
    """``data`` as JSON in its own key order, for storing (the hash is of the canonical
    form): orjson's, a fifth of the cost, when it takes the data as json does (plain
    dicts, lists, strings and numbers: string keys, valid UTF-8, 64-bit integers), else
    :func:`exact_json`'s (subclasses too: an OrderedDict's order is its own, which orjson
    would not read). The two may write a float differently (``1e16``, ``1e+16``); both
    read back as the same number."""
    try:
        return orjson.dumps(data, option=orjson.OPT_PASSTHROUGH_SUBCLASS).decode()
    except TypeError:  # (orjson.JSONEncodeError is one)
        return exact_json(data, sort_keys=False)


def tagged_json(data: Any, *, sort_keys: bool = False) -> str:
    """``data`` in a JSON form that keeps what JSON's own cannot: in JSON, the escapes of
    a high and a low surrogate side by side read back as the one character of the pair
    (``"\\ud83d\\ude00"`` is 😀), so a string that held the two lone surrogates would
    not read back as it was. Every value is tagged: ``["s", text]``, ``["c", [code
    points]]`` (a string with surrogates), ``["d", [[key, value], ...]]``, ``["l", [...]]``,
    ``["v", number, true, false or null]``. Used only for data that holds surrogates."""
    return json.dumps(_tag(data, sort_keys), separators=(",", ":"), allow_nan=False)


def _tag(value: Any, sort_keys: bool) -> Any:
    if isinstance(value, str):
        return (
            ["s", value]
            if exact_text(value.replace("\x00", ""))
            else ["c", [ord(c) for c in value]]
        )
    if isinstance(value, dict):
        items = sorted(value.items()) if sort_keys else value.items()
        return ["d", [[_tag(str(k), sort_keys), _tag(v, sort_keys)] for k, v in items]]
    if isinstance(value, list | tuple):
        return ["l", [_tag(v, sort_keys) for v in value]]
    return ["v", value]


def untagged(text: str) -> Any:
    """The value :func:`tagged_json` wrote."""
    return _untag(json.loads(text))


def _untag(tagged: Any) -> Any:
    kind, value = tagged
    if kind == "s" or kind == "v":
        return value
    if kind == "c":
        return "".join(map(chr, value))
    if kind == "d":
        return {_untag(k): _untag(v) for k, v in value}
    return [_untag(v) for v in value]


def key_code_points(key: str) -> str:
    """What ``records.key_json`` holds for a key a text column cannot: its code points,
    as a JSON array (a JSON string would join a split surrogate pair on reading)."""
    return json.dumps([ord(c) for c in key])


def key_from_code_points(text: str) -> str:
    return "".join(map(chr, json.loads(text)))


def exact_text(text: str) -> bool:
    """Whether a text column of every backend holds ``text`` as it is: no NUL
    (PostgreSQL's text cannot), no lone surrogate (UTF-8 cannot)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str) -> str:
    """``text`` as every backend can carry it, for text shown to people (errors, URLs,
    the readable ``key`` column): lone surrogates (from bytes decoded with
    ``surrogateescape``, or made up by code) become the escape ``\\udc80`` (UTF-8 cannot
    carry them), NUL becomes ``\\x00`` (PostgreSQL text and JSONB cannot), so that one
    odd string can never break the transaction it is written in. Not one to one: where
    the text itself matters (a record's key and data), :func:`exact_json` keeps it."""
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _holds_surrogates(data: Any) -> bool:
    if isinstance(data, str):
        return not exact_text(data.replace("\x00", ""))
    if isinstance(data, dict):
        return any(_holds_surrogates(k) or _holds_surrogates(v) for k, v in data.items())
    if isinstance(data, list | tuple):
        return any(_holds_surrogates(v) for v in data)
    return False


def storable_data(data: Any) -> Any:
    """``data`` with every string (keys too) made :func:`storable`."""
    if isinstance(data, str):
        return storable(data)
    if isinstance(data, dict):
        return {storable_data(k): storable_data(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [storable_data(v) for v in data]
    return data


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class NewUrl:
    """A request to add to the frontier.

    ``url`` is its frontier key: the canonical URL for a plain GET, with ``#`` and a
    fingerprint of the method and body appended otherwise (``crawl/requests.py``; a
    canonical URL never has a fragment, so the two never meet). ``request`` holds what
    else it takes to send it again exactly (method, headers, body, cookies, ``meta``,
    ``cb_kwargs``) as JSON, or None for a plain GET.
    """

    url: str
    depth: int = 0
    callback: str | None = None
    priority: int = 0
    request: str | None = None
    #: when the page last changed, as its sitemap's ``<lastmod>`` says: a done page
    #: fetched before then is due for a revisit at once
    changed_at: float | None = None


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class Lease:
    """A URL granted to one worker until ``expires`` (or until that worker dies).

    ``url`` is the frontier key and ``request`` the stored request, as in :class:`NewUrl`.
    ``cookies`` is the version of the crawl's stored cookies when it was granted: a
    worker whose jar is older loads them before it fetches (another worker logged in).
    ``listed``: the URL's page yielded records at its last parse (its listing, schema
    SQLite 13): what it yields now may leave some of them out. ``seen``: what the page's
    last fetch showed (its validators, digest and record ids: ``crawl/revisits.py``), None
    for a page never fetched; a recrawl asks for changes only with it.
    """

    frontier_id: int
    url: str
    depth: int
    attempts: int
    callback: str | None
    grant_id: int
    request: str | None = None
    cookies: int = 0
    listed: bool = False
    seen: str | None = None


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class RecordRow:
    """A record ready to be stored: id computed, data serialised and hashed.

    ``is_item``: yielded as a plain item (a dict, a dataclass...), whose fields are the
    whole of it, rather than as a ``Record``, whose key stands beside its data.

    ``key`` is the natural key as the ``key`` column shows it; when that column cannot
    hold it exactly (NUL, lone surrogates), ``key`` is its readable escape and
    ``key_json`` its code points (:func:`key_code_points`), from which it is read back
    exactly. ``data_json`` is :func:`exact_json` of the data with its fields in the order
    the spider gave them, which reads back exactly, unless the data holds surrogates:
    then ``data_exact`` is :func:`tagged_json` of it, and is what is read back.
    ``content_hash`` is the SHA-256 of the canonical form (fields sorted, and tagged when
    the data holds surrogates), so the same fields in another order are no change.
    """

    id: str
    source: str
    key: str
    url: str | None
    data_json: str
    content_hash: str
    key_json: str | None = None
    is_item: bool = False
    data_exact: str | None = None

    @classmethod
    def build(
        cls, *, id: str, source: str, key: str, url: str | None, data: Any, is_item: bool = False
    ) -> RecordRow:
        """Serialise and hash ``data``; raises ``ValueError``/``TypeError`` for what JSON
        cannot carry (NaN, infinities, objects)."""
        canonical = exact_json(data)  # (first: it refuses NaN, which orjson writes as null)
        text = _as_given(data) if isinstance(data, dict) else canonical
        data_exact = None
        if canonical.isascii() and "\\ud" in canonical and _holds_surrogates(data):
            data_exact = tagged_json(data)
            canonical = tagged_json(data, sort_keys=True)
        digest = hashlib.sha256(canonical.encode()).hexdigest()
        key_json = None
        if not exact_text(key):
            key_json, key = key_code_points(key), storable(key)
        if url is not None and not exact_text(url):
            url = storable(url)
        if not exact_text(source):
            source = storable(source)
        return cls(id, source, key, url, text, digest, key_json, is_item, data_exact)


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class PageOutcome:
    """What became of one leased URL; committed in one transaction with its records.

    ``kind`` is ``done`` (records and links stored, URL done), ``retry`` (URL pending again
    ``retry_in`` seconds after the commit), ``failed`` (dead letter with ``error``),
    ``skipped`` (done without a fetch, e.g. robots.txt disallows it) or ``deferred``
    (pending again after ``retry_in`` without a fetch and without counting an attempt: its
    robots.txt is unreachable for now; the origin's other pending URLs are held back as
    long). ``links_skipped`` counts the malformed or unsupported links the page held,
    ``links_cut`` those beyond ``max_links_per_page``, ``links_offsite`` those outside
    the allow-list (neither followed);
    ``files`` are the downloads its records refer to (already stored on disk).
    ``render`` is counted per URL pattern (auto rendering's memory) when the page is done.
    """

    lease: Lease
    kind: Outcome
    http_status: int | None = None
    error: str | None = None
    records: Sequence[RecordRow] = ()
    links: Sequence[NewUrl] = ()
    retry_in: float = 0.0
    links_skipped: int = 0
    cookies: Sequence[CookieRow] = ()
    files: Sequence[FileRow] = ()
    links_cut: int = 0
    links_offsite: int = 0
    #: auto rendering's decision for a done page: (URL pattern, needed the browser)
    render: tuple[str, bool] | None = None
    #: what the fetch showed, for the next pass to ask for changes only (JSON; None:
    #: keep what is stored), how a recrawl's fetch went (``not-modified``, ``unchanged``:
    #: its records are kept as yielded again), and the body bytes downloaded
    validators: str | None = None
    revisit: str | None = None
    body_bytes: int | None = None
    #: a page found unchanged: the ids of the records it yields again (not parsed)
    kept: Sequence[str] = ()
    #: a done page: seconds from its commit until it is due for a revisit (None: due
    #: whenever a pass of due pages runs)
    revisit_in: float | None = None
    #: False: no request reached the network (a failure refused before the first hop,
    #: by the address guard): a failed page's grant outcome is ``refused``, no request
    #: counted
    sent: bool = True


@pickled_as_tuple
@dataclass(frozen=True, slots=True)
class CookieRow:
    """A cookie a response set (``header``: its ``Set-Cookie`` value, ``url``: the URL
    that set it), kept with the page's done mark so a restarted crawl sends it again.
    ``domain``, ``path`` and ``name`` say which earlier cookie it replaces."""

    domain: str
    path: str
    name: str
    url: str
    header: str


@dataclass(frozen=True, slots=True)
class StoredCookies:
    """The cookies a crawl's committed pages set, as ``(url, Set-Cookie value)`` in the
    order they were set, and the version of that set (raised by every commit that stores
    cookies; 0: none yet)."""

    rows: list[tuple[str, str]]
    version: int


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record as read back from the store."""

    crawl: str
    id: str
    source: str
    key: str
    url: str | None
    version: int
    first_seen: float
    last_changed: float
    data: Any
    gone_at: float | None = None  # when its page stopped yielding it (then last_changed too)
    is_item: bool = False  # yielded as a plain item (its fields are the whole of it), not a Record


@dataclass(frozen=True, slots=True)
class FailedUrl:
    """A URL in the dead letter: it failed ``attempts`` times, last with ``error``."""

    crawl: str
    url: str
    attempts: int
    http_status: int | None
    error: str | None
    failed_at: float | None


@dataclass(frozen=True, slots=True)
class CrawlStats:
    """Counts for one crawl, every one computed from stored rows.

    ``stale`` counts page commits refused because their lease had been granted again
    (each one a repeated request); ``links_skipped`` the malformed or unsupported links
    pages held, ``links_cut`` the links beyond ``max_links_per_page`` and
    ``links_offsite`` those outside the allow-list (neither followed), as last fetched.
    """

    crawl: str
    pending: int = 0
    leased: int = 0
    done: int = 0
    failed: int = 0
    records: int = 0
    lease_grants: int = 0
    requests: int = 0
    retries: int = 0
    repeated: int = 0
    stale: int = 0
    links_skipped: int = 0
    links_cut: int = 0
    links_offsite: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def known(self) -> int:
        return self.pending + self.leased + self.done + self.failed

    @property
    def requests_per_record(self) -> float | None:
        return self.requests / self.records if self.records else None


@dataclass(frozen=True, slots=True)
class RobotsEntry:
    """What the store knows of one origin's robots.txt, times in seconds from now
    (``age``: seconds ago).

    ``body`` is the last copy read (None: never read; ``""``: no rules), ``age`` how long
    ago its download started; while the file is unreachable ``failing_for`` says for how
    long, ``retry_in`` when to try again (may be negative: due). ``claimed_for`` is how
    long another worker's claim to fetch it still runs (None: not claimed).
    """

    body: str | None
    age: float | None
    failing_for: float | None
    failures: int
    retry_in: float | None
    claimed_for: float | None


@dataclass(frozen=True, slots=True)
class Waiting:
    """An origin whose robots.txt is failing, and what waits for it: ``pages`` pending
    URLs held back, ``why`` (the last failure), ``since`` and ``next_try`` (epoch
    seconds, the database's clock)."""

    origin: str
    pages: int
    why: str
    since: float
    next_try: float | None


@dataclass(frozen=True, slots=True)
class WalState:
    """An SQLite WAL the store tried to checkpoint: ``size`` in bytes before, and whether
    a reader's old snapshot held the checkpoint back (then the WAL keeps growing until
    that reader ends its transaction)."""

    size: int
    held: bool


@dataclass(frozen=True, slots=True)
class Due:
    """Whether a crawl still has open work, and in how many seconds some can next be
    leased (0: now; None: no open work)."""

    open: bool
    wait: float | None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Seconds before attempt n + 1 of a URL: ``base * 2**(n - 1)``, at most ``cap``."""

    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.base * 2.0 ** (max(attempt, 1) - 1)))


@dataclass(frozen=True, slots=True)
class Politeness:
    """What a claim honours for all workers together: at most ``per_host`` leases per
    origin (None: no limit but each worker's own), and ``delay`` seconds between two
    grants for one origin (an origin's robots.txt Crawl-delay wins when larger)."""

    per_host: int | None = None
    delay: float = 0.0

    @property
    def active(self) -> bool:
        return self.per_host is not None or self.delay > 0


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A worker that registered with the store: alive while its liveness lock is held.

    ``leases`` counts the URLs it holds now, ``pages`` the pages it committed (done,
    retried or failed), both computed from rows.
    """

    owner: str
    crawl: str
    host: str
    pid: int
    started_at: float
    alive: bool
    leases: int
    pages: int
    last_seen: float | None = None  # the worker said it was at work (every few seconds)
