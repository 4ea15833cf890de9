"""A store that stays small: the outbox's old events pruned, the database compacted.

The outbox holds every version of every record that changed (a record's history, and
what webhooks are sent). An event older than the retention is pruned once no endpoint of
its crawl still has it to deliver: its delivered deliveries go with it, pending, leased
and failed ones keep it. Pruning walks the outbox by id in short transactions, so crawls
and dispatchers go on meanwhile.
"""

from __future__ import annotations

from typing import Any

from crashsafe.store.effect_values import Pruned
from crashsafe.store.sql_base import SQLBase

#: outbox ids per pruning transaction
PRUNE_CHUNK = 20_000


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
