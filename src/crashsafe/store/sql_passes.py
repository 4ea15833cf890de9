"""Passes of a continuous or scheduled crawl, over the named queries.

A pass ends when nothing of the crawl is pending or leased; the next one begins in the
same transaction that sees it end, under a lock every worker of the crawl takes
(PostgreSQL: an advisory lock; SQLite: the write lock), so two machines never run two
passes of one crawl at once: whoever comes second finds the new pass open and joins it.

A page that answered 404 or 410 at its last three visits in a row is retired (the
queries' ``gone_streak >= 3``, on which the partial index frontier_retired is built):
no pass queues it again (a site that takes pages down does not make every pass longer
for good), until a page parsed links to it again, a run is given it as a start URL, or
``recrawl --retired``. A start URL (depth 0) never retires: the crawl grows from it.
"""

from __future__ import annotations

import time

from crashsafe.store.effect_values import Pass, PassFigures, PassTurn
from crashsafe.store.sql_base import SQLBase, Tx, first

#: seconds between looks for a crawl's first retired page (none: no link looked up)
RETIRED_EVERY = 5.0


class SQLPasses(SQLBase):
    """Begin passes as they fall due; what each pass did."""

    _retired: dict[str, tuple[float, bool]] | None = None  # crawl: (looked at, any)

    def _any_retired(self, tx: Tx, crawl: str, *, look: bool = False) -> bool:
        """Whether ``crawl`` has a retired page, whose links a commit must look for. Once
        one is seen, always (they rarely all come back); while none, looked at again
        after this store committed a page gone (``_may_retire``) or with ``look``, and
        every few seconds for the other workers' (a page another worker retires comes
        back a pass later if linked in those seconds)."""
        if self._retired is None:
            self._retired = {}
        known = self._retired.get(crawl)
        now = time.monotonic()
        if known is None or (not known[1] and (look or now - known[0] > RETIRED_EVERY)):
            known = self._retired[crawl] = (now, bool(tx.rows("any_retired", {"crawl": crawl})))
        return known[1]

    def _may_retire(self, crawl: str) -> None:
        """This store committed a page gone: the next look asks the database again."""
        if self._retired is not None and not self._retired.get(crawl, (0.0, True))[1]:
            del self._retired[crawl]

    def retired(self, crawl: str) -> int:
        """How many of the crawl's pages are retired (gone at their last visits)."""

        def go() -> int:
            with self._read() as tx:
                return int(first(tx.rows("count_retired", {"crawl": crawl})))

        return self._run(go)

    def revive_retired(self, crawl: str) -> int:
        """Make the crawl's retired pages due again (the next pass fetches them); returns
        how many."""

        def go() -> int:
            with self._write() as tx:
                return tx.run("revive_retired", {"crawl": crawl, "now": self._now()})

        return self._run(go)

    def begin_pass(
        self,
        crawl: str,
        *,
        every: float | None = None,
        due: bool = False,
        early: float = 0.0,
        last: int | None = None,
    ) -> PassTurn:
        """If the crawl's current pass is complete, note what it did and begin the next
        one when it is due: ``every`` seconds after the last one began (every done and
        failed page queued again; with ``due`` too, only those due), or else as soon as
        a page is due for its next visit (those, and those due within ``early`` seconds,
        so that a pass takes many). Else say how long until one may begin. ``last``: the
        last pass the caller takes part in; once it is complete, none begins (``ended``)."""

        def go() -> PassTurn:
            with self._write() as tx:
                return self._turn(tx, crawl, every, due, early, last)

        return self._run(go)

    def _turn(
        self,
        tx: Tx,
        crawl: str,
        every: float | None,
        due: bool,
        early: float,
        last: int | None,
    ) -> PassTurn:
        at = self._now()
        p = {"crawl": crawl, "now": at, "early": early}
        tx.rows("lock_passes", p)
        number, began, now = tx.rows("current_pass", p)[0]
        number, began, now = int(number), float(began), float(now)
        if first(tx.rows("pass_open", p)):
            return PassTurn(open=True, number=number)
        if last is not None and number >= last:
            self._finish(tx, crawl, number, began)
            return PassTurn(number=number, ended=True)
        if every is not None:
            wait = began + every - now
            if wait > 0:
                return PassTurn(wait=wait, number=number)
        else:
            after = first(tx.rows("next_visit_at", p))
            if after is None or float(after) > now + early:
                later = None if after is None else float(after) - early - now
                return PassTurn(wait=later, number=number)
        # a pass begins: the last one's gone records and figures first (mark_gone looks
        # at a complete pass only)
        self._finish(tx, crawl, number, began, at)
        only_due = due or every is None
        requeued = tx.run("requeue_due" if only_due else "requeue_done", {**p, "older_than": 0})
        requeued += tx.run("requeue_failed_pages", {**p, "all": not only_due})
        if requeued == 0:  # nothing done or failed at all, or none due yet
            return PassTurn(wait=every, number=number)
        started = int(first(tx.rows("add_pass", {**p, "requeued": requeued})))
        late = 0.0 if every is None else now - (began + every)
        overran = 0.0
        if every is not None:
            ended = first(tx.rows("pass_ended_at", {**p, "pass": number}))
            overran = 0.0 if ended is None else max(0.0, float(ended) - (began + every))
        return PassTurn(started=Pass(started, requeued), late=late, number=started, overran=overran)

    def recrawl(
        self, crawl: str, *, older_than: float = 0.0, due: bool = False, force: bool = True
    ) -> Pass:
        """Put the crawl's done URLs finished at least ``older_than`` seconds ago (with
        ``due``: those due for their next visit) back to pending, as pass N + 1, the
        last pass finished first if it is complete. Their pages are fetched again by the
        next crawl run: changed records get a new version, records a page no longer
        yields are gone. Without ``force``, nothing is queued while the last pass still
        has pages pending or leased (``Pass.open``): two passes would run at once."""

        def go() -> Pass:
            at = self._now()
            p = {"crawl": crawl, "now": at, "older_than": older_than, "early": 0.0}
            with self._write() as tx:
                tx.rows("lock_passes", p)
                number, began, _ = tx.rows("current_pass", p)[0]
                if not first(tx.rows("pass_open", p)):
                    self._finish(tx, crawl, int(number), float(began), at)
                elif not force:
                    return Pass(int(number), 0, open=True)
                n = tx.run("requeue_due" if due else "requeue_done", p)
                if n == 0:
                    return Pass(0, 0)
                number = first(tx.rows("add_pass", {**p, "requeued": n}))
                return Pass(int(number), n)

        return self._run(go)

    def finish_pass(self, crawl: str) -> int:
        """If the crawl's current pass is complete (nothing pending or leased), mark gone
        the live records of the pages it fetched that no page yielded in it, note what
        the pass did, and return how many went. Doing it once the pass is over, not page
        by page, keeps a record that moved to a page fetched later from being taken for
        gone. Idempotent."""

        def go() -> int:
            with self._write() as tx:
                p = {"crawl": crawl, "now": self._now()}
                tx.rows("lock_passes", p)
                if first(tx.rows("pass_open", p)):
                    return 0
                number, began, _ = tx.rows("current_pass", p)[0]
                return self._finish(tx, crawl, int(number), float(began))

        return self._run(go)

    def _finish(
        self, tx: Tx, crawl: str, number: int, began: float, now: float | None = None
    ) -> int:
        """Mark gone what the complete pass no longer yielded and note its figures (at
        ``now``: the next pass's start, if one begins in the same transaction, so that
        its figures do not count these gone records again)."""
        now = self._now() if now is None else now
        p = {"crawl": crawl, "now": now, "pass": number, "started_at": began}
        gone = tx.run("mark_gone", p) if number > 1 else 0  # (pass 1: nothing was before)
        tx.run("put_pass_figures", p)
        return gone

    def pass_figures(self, crawl: str, *, limit: int = 20) -> list[PassFigures]:
        """The crawl's complete passes, the last first (at most ``limit``)."""

        def go() -> list[PassFigures]:
            with self._read() as tx:
                rows = tx.rows("list_pass_figures", {"crawl": crawl, "limit": limit})
            return [
                PassFigures(int(n), float(a), float(b), *(int(v) for v in rest))
                for n, a, b, *rest in rows
            ]

        return self._run(go)
