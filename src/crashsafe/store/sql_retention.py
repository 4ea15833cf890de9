"""A store that stays small: the outbox's old events pruned, lease grants folded into
counts, the database compacted.

The outbox holds every version of every record that changed (a record's history, and
what webhooks are sent). An event older than the retention is pruned once no endpoint of
its crawl still has it to deliver: its delivered deliveries go with it, pending, leased
and failed ones keep it. Pruning walks the outbox by id in short transactions, so crawls
and dispatchers go on meanwhile.

A lease grant is a row per page leased, the ground of the crawl's request and repeat
figures. A run's older grants of a page it has leased again, and the rows of a run that
is over, fold into counts per owner and outcome (grant_totals): the figures stay what
they were (a lost lease folded stays counted lost, not stale, if its paused worker
commits it later: a repeat either way) and the table stays about as large as the crawl,
however many passes.
"""

from __future__ import annotations

import functools
from typing import Any

from crashsafe.store.effect_values import Pruned
from crashsafe.store.sql_base import SQLBase, Tx

#: outbox ids per pruning transaction
PRUNE_CHUNK = 20_000
#: lease grants per folding transaction
FOLD_CHUNK = 20_000
#: lease grants looked at a time (a walk over ranges of pages: memory stays bounded)
FOLD_WALK = 500_000
#: seconds a finished run's grants stay rows after its newest: its own figures are read
#: as it ends (``since``), when it has no live worker any more
FOLD_GRACE = 600.0


def run_of(owner: str) -> str:
    """The run an owner id belongs to (liveness.new_owner_id: ``run.host-pid-x``), or the
    owner itself when it names none."""
    return owner.split(".", 1)[0] if "." in owner else owner


class SQLRetention(SQLBase):
    """Pruning of old outbox events and their deliveries."""

    def prune_outbox(self, crawl: str, older_than: float) -> Pruned:
        """Remove the crawl's events older than ``older_than`` seconds that no endpoint
        still has to deliver, and their delivered deliveries."""

        def bounds() -> tuple[int, int]:
            with self._read() as tx:
                low, high = tx.rows("outbox_ids", {"crawl": crawl})[0]
            return int(low), int(high)

        after, top = self._run(bounds)
        events = deliveries = 0
        while after < top:
            upto = min(after + PRUNE_CHUNK, top)
            p = {"crawl": crawl, "now": self._now(), "older_than": older_than,
                 "after": after, "upto": upto}  # fmt: skip

            def chunk(p: dict[str, Any] = p) -> tuple[int, int]:
                with self._write() as tx:
                    d = tx.run("prune_deliveries", p)
                    return d, tx.run("prune_events", p)

            d, e = self._run(chunk)
            deliveries, events, after = deliveries + d, events + e, upto
        return Pruned(events, deliveries)

    def fold_grants(self, crawl: str) -> int:
        """Fold the crawl's lease grants that no figure needs one by one into counts per
        owner and outcome: a run's grants that a newer grant of the same run and page
        stands for, and every grant of a run none of whose workers is alive, once
        ``FOLD_GRACE`` has passed since it was last at work (its newest grant, or its
        workers' last_seen). A current lease stays a row. Returns how many were folded.
        Walks the pages in ranges of about ``FOLD_WALK`` grants (on average)."""

        def plan() -> tuple[dict[str, Any], list[tuple[int, int]]]:
            with self._read() as tx:
                upto, now = tx.rows("high_water", {"now": self._now()})[0]
                p: dict[str, Any] = {"crawl": crawl, "upto": int(upto)}
                owners = tx.rows("grant_owners", p)
                live = self._alive(tx, [row[0] for row in owners]) if owners else set()
            live_runs = {run_of(o) for o in live}
            ended: dict[str, float] = {}  # run: when it was last at work
            for owner, newest, *_ in owners:
                run = run_of(owner)
                ended[run] = max(ended.get(run, 0.0), float(newest))
            p["dead"] = [
                o for o, *_ in owners
                if run_of(o) not in live_runs and ended[run_of(o)] < float(now) - FOLD_GRACE
            ]  # fmt: skip
            if not owners:
                return p, []
            grants = sum(int(row[2]) for row in owners)
            low = min(int(row[3]) for row in owners) - 1
            high = max(int(row[4]) for row in owners)
            step = max(1, (high - low) * FOLD_WALK // max(grants, 1))
            return p, [(at, min(at + step, high)) for at in range(low, high, step)]

        p, ranges = self._run(plan)

        def which(low: int, high: int) -> list[int]:
            with self._read() as tx:
                return [row[0] for row in tx.rows("foldable_grants", {**p, "low": low,
                                                                      "high": high})]  # fmt: skip

        folded = 0
        for low, high in ranges:  # FOLD_WALK ids or so in memory at a time
            ids = self._run(functools.partial(which, low, high))
            for at in range(0, len(ids), FOLD_CHUNK):
                chunk = ids[at : at + FOLD_CHUNK]

                def fold(chunk: list[int] = chunk) -> int:
                    with self._write() as tx:
                        return self._fold(tx, chunk)

                folded += self._run(fold)
        return folded

    def _fold(self, tx: Tx, ids: list[int]) -> int:
        """Count grants ``ids`` into grant_totals and delete them, a current lease
        excepted, the count and the delete seeing the same rows; returns how many went."""
        raise NotImplementedError
