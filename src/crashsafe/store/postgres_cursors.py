"""Where a PostgreSQL worker's claims resume: a cursor per priority.

A ``FOR UPDATE SKIP LOCKED`` claim walks the pending index from its start. Each URL it
granted left an index entry behind (its row's old version), which PostgreSQL removes
only once no transaction can still see it: while one long transaction (a report, a
session left idle in a transaction) holds back vacuum, every claim walks past all the
entries of the URLs claimed since, and claims slow down as the crawl goes on (measured:
``benchmarks/frontier_scaling.py --held-snapshot``). So a worker remembers, per
priority, the last URL it was granted, and its next claims start there (``claim_after``):
new URLs get larger ids, so they lie ahead.

What lies behind a cursor is found by the plain claim (``claim_due``), which the worker
runs when it has no cursors yet, when a claim from the cursors comes up short (then for
the rest), every ``RESCAN_SECONDS`` of the store's clock (URLs given back or retried, by
any worker, a priority it has not seen, lapsed leases; longer after a slow one), after
any write of its own other than a page commit (a release, a retry queued:
``invalidate``), and always in a crawl of more than ``MAX_BANDS`` priorities.

A plain claim that is slow where the claims from the cursors are not (it walks dead
index entries they skip) makes the next one wait longer; one that is slow as they are
(a busy server: both wait on the same group's writes) does not, so URLs behind the
cursors are not held back on a server that is merely busy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

RESCAN_SECONDS = 2.0
MAX_BANDS = 8  # priorities with a cursor each; a crawl with more claims the plain way
# A plain claim that took SLOW_CLAIM seconds or more (while a long transaction holds back
# vacuum it walks past every URL leased since: 0.55 s after six minutes, four workers,
# auto_explain) makes the next wait RESCAN_FACTOR times as long, up to RESCAN_MAX: what
# lies behind the cursors then waits longer, the claims from them go on.
SLOW_CLAIM = 0.25
RESCAN_FACTOR = 20
RESCAN_MAX = 60.0
# ... and only if it took SLOWER times as long as the claims from the cursors usually do
# (their time, like the plain claim's, includes the group's writes sent before it).
SLOWER = 4.0


class ClaimCursors:
    """One worker's cursors, per crawl: priority -> the largest id granted in it."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._bands: dict[str, dict[int, int]] = {}
        self._rescan_at: dict[str, float] = {}
        # What claims of the transaction under way granted: (crawl, plain?, [(priority, id)])
        self._granted: list[tuple[str, bool, list[tuple[int, int]]]] = []
        self._cursor_claim_took: float | None = None  # a moving average, seconds

    def now(self) -> float:
        return self._clock()

    def usable(self, crawl: str) -> dict[int, int] | None:
        """The cursors to claim from, or None when the plain claim is due."""
        bands = self._bands.get(crawl)
        if not bands or len(bands) > MAX_BANDS or self._clock() >= self._rescan_at.get(crawl, 0.0):
            return None
        return bands

    def claimed_from_cursors(self, took: float) -> None:
        """A claim from the cursors took ``took`` seconds."""
        last = self._cursor_claim_took
        self._cursor_claim_took = took if last is None else 0.8 * last + 0.2 * took

    def rescanned(self, crawl: str, took: float = 0.0) -> None:
        """A plain claim ran (in the transaction under way), in ``took`` seconds: the
        cursors start afresh."""
        usual = self._cursor_claim_took
        slow = took >= SLOW_CLAIM and (usual is None or took >= SLOWER * usual)
        wait = min(RESCAN_MAX, RESCAN_FACTOR * took) if slow else RESCAN_SECONDS
        self._bands[crawl] = {}
        self._rescan_at[crawl] = self._clock() + wait

    def granted(self, crawl: str, rows: Iterable[tuple[Any, ...]], *, plain: bool) -> None:
        """Note the (id, ..., priority at [5], ...) rows a claim granted: they move the
        cursors once the transaction commits (``committed``). A plain claim's rows put
        a priority's cursor just before the first of them: they need not be the first
        pending ones in id order (a lapsed lease comes first, whatever its id), and the
        next claim from the cursor passes the rest at once (they are leased)."""
        self._granted.append((crawl, plain, [(int(r[5]), int(r[0])) for r in rows]))

    def learned(self, crawl: str, priorities: Iterable[int]) -> None:
        """Priorities of URLs this worker just added. A new one's cursor is the largest id
        this worker was granted: URLs added since have larger ids (the few added by
        others before wait for the next plain claim)."""
        bands = self._bands.get(crawl)
        if bands:
            newest = max(bands.values())
            for priority in priorities:
                bands.setdefault(priority, newest)

    def committed(self) -> None:
        for crawl, plain, rows in self._granted:
            bands = self._bands.setdefault(crawl, {})
            if plain:
                for priority, id_ in rows:
                    bands[priority] = min(bands.get(priority, id_), id_ - 1)
            else:
                for priority, id_ in rows:
                    bands[priority] = max(bands.get(priority, id_), id_)
        self._granted.clear()

    def rolled_back(self) -> None:
        self._granted.clear()

    def invalidate(self) -> None:
        """Something this worker wrote may have put URLs behind its cursors."""
        self._bands.clear()
        self._rescan_at.clear()
        self._granted.clear()
