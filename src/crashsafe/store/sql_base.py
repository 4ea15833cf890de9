"""The frame every SQL backend fills in: a transaction type and the hooks of a store.

:class:`SQLBase` names what a backend (``sqlite.py``, ``postgres.py``) supplies: its
transactions (a :class:`Tx` runs named SQL from ``sql/<dialect>/queries.sql``), its error
handling, its clock and its liveness locks. The rules built on them are in ``core.py``
(frontier, commits, claims, reading), ``sql_workers.py`` and ``sql_robots.py``.

Queries take named parameters. ``now`` is the caller's clock, or None for the
database's own (``_now``); lists bind as the backend binds arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
Params = Mapping[str, Any]
#: A claimed row: frontier id, url, depth, attempts, callback, priority, request, grant id,
#: the crawl's cookie jar version (None: no cookie stored yet), whether its page lists records,
#: what its last fetch showed (``frontier.validators``).
Claimed = tuple[int, str, int, int, str | None, int, str | None, int, int | None, bool, str | None]


class Tx(Protocol):
    """One transaction of a backend, running its named queries."""

    def rows(self, name: str, params: Params) -> list[tuple[Any, ...]]: ...

    def run(self, name: str, params: Params) -> int:
        """Run ``name``; return how many rows it changed."""
        ...

    def many(self, name: str, rows: Sequence[Params]) -> int:
        """Run ``name`` once per parameter set; return how many rows they changed."""
        ...

    def fenced(self, name: str, rows: Sequence[Params]) -> None:
        """Run the fenced state update ``name`` for ``rows`` and set their grants'
        outcomes (each row's ``grant`` and ``outcome``); each must match its row, or
        :class:`StaleInGroup` is raised, now or by the end of the transaction (which then
        does not commit)."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """Undo what runs inside if it raises (and let the exception through)."""
        ...


class StaleInGroup(Exception):
    """A group commit met a lease that is no longer current: redo it page by page."""


def fenced_by_count(tx: Tx, name: str, rows: Sequence[Params]) -> None:
    """:meth:`Tx.fenced` for a transaction whose counts come back at once."""
    if tx.many(name, rows) != len(rows):
        raise StaleInGroup
    tx.many("set_grant_outcome", rows)


def first(rows: list[tuple[Any, ...]]) -> Any:
    """The first column of the first row (None: no row)."""
    return rows[0][0] if rows else None


class SQLBase:
    """What a backend supplies, and the state every part of a store shares."""

    url: str
    _owner: str | None = None

    # -- what a backend supplies -----------------------------------------------------------
    def _write(self) -> AbstractContextManager[Tx]:
        """A write transaction (SQLite: the database's write lock, taken at once)."""
        raise NotImplementedError

    def _read(self) -> AbstractContextManager[Tx]:
        """A read-only transaction: one snapshot for every query in it."""
        raise NotImplementedError

    def _write_group(self) -> AbstractContextManager[Tx]:
        """The write transaction of a group commit's fast path, where every lease is taken
        to be current (a backend may send its statements without waiting for each)."""
        return self._write()

    def _run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` (which opens its own transactions), turning the driver's errors
        into :class:`StoreError` with what to do; a backend may retry it on a new
        connection when the old one was lost."""
        raise NotImplementedError

    def _now(self) -> float | None:
        """The time to give queries: the injected clock's, or None (the database's)."""
        raise NotImplementedError

    def _claim_due(self, tx: Tx, p: Params) -> list[Claimed]:
        """Grant up to ``limit`` due URLs (lapsed leases first, then pending ones by
        priority and age) to ``owner``, one lease_grants row each."""
        raise NotImplementedError

    def _claim_ids(self, tx: Tx, p: Params, ids: list[int]) -> list[Claimed]:
        """Grant the URLs ``ids`` that are still due, as :meth:`_claim_due` does."""
        raise NotImplementedError

    def _take_liveness(self, owner: str, tx: Tx) -> None:
        """Hold ``owner``'s liveness lock until :meth:`_drop_liveness` or death."""
        raise NotImplementedError

    def _drop_liveness(self, owner: str) -> None:
        raise NotImplementedError

    def _alive(self, tx: Tx, owners: Sequence[str]) -> set[str]:
        """Those of ``owners`` whose liveness lock is held."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError
