"""What every SQL backend does the same way: the Store protocol over named queries.

A backend (``sqlite.py``, ``postgres.py``) fills in :class:`~crashsafe.store.sql_base.SQLBase`:
its transactions, its clock, its liveness locks. The rules live here and in
``sql_workers.py`` (workers, reclaiming) and ``sql_robots.py`` (robots.txt,
Crawl-delays), once:

- outcome rules: what a page's outcome writes (done or skipped: its records, its links
  and the done mark; retry or deferred: pending again after its backoff, counting an
  attempt or not; failed: the dead letter);
- fencing (DESIGN rule 4): every state change is conditional on the lease's grant still
  being the URL's current one. A group commit is tried whole first; if one page turns
  out stale, or cannot be stored, the group is redone page by page under savepoints;
- claims: lapsed leases are due work (their grant ends lost, which counts an attempt: it
  may have fetched); politeness across workers when asked (``hosts.py``);
- figures computed from counted rows (``stats.py``).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from crashsafe.errors import StoreError
from crashsafe.store import masked
from crashsafe.store.hosts import choose_politely, origin_of
from crashsafe.store.sql_base import Claimed, Params, Tx, first
from crashsafe.store.sql_control import SQLControl, split_paused
from crashsafe.store.sql_effects import SQLEffects
from crashsafe.store.sql_passes import SQLPasses
from crashsafe.store.sql_retention import SQLRetention
from crashsafe.store.sql_robots import SQLRobots
from crashsafe.store.sql_workers import SQLWorkers
from crashsafe.store.stats import crawl_stats
from crashsafe.store.values import (
    STALE,
    CrawlStats,
    Due,
    FailedUrl,
    Lease,
    NewUrl,
    PageOutcome,
    Politeness,
    StoredCookies,
    StoredRecord,
    WalState,
    key_from_code_points,
    storable,
    untagged,
)

_by_id = operator.itemgetter("id")
_by_url = operator.itemgetter("url")
_by_sha = operator.itemgetter("sha256")

#: a page done with one of these says nothing of its records: no status (not fetched:
#: robots.txt), or a temporary redirect not followed (the end of a pass skips them too)
_SAYS_NOTHING = frozenset({None, 302, 303, 307})
_ANSWERS = frozenset({301, 308})  # done with an error, yet an answer: the page moved for good


#: Scans a claim makes at most past URLs of paused origins before it gives up for now.
PAUSED_SCANS = 8


class SQLStore(SQLWorkers, SQLRobots, SQLEffects, SQLPasses, SQLRetention, SQLControl):
    """The Store protocol for SQL backends; a subclass supplies what ``SQLBase`` names."""

    # -- frontier ------------------------------------------------------------------------
    def enqueue(self, crawl: str, urls: Iterable[NewUrl]) -> int:
        now = self._now()
        rows = [self._link(crawl, u, now) for u in urls]
        if not rows:
            return 0

        def go() -> int:
            with self._write() as tx:
                added = tx.many("enqueue_url", rows)
                if added < len(rows) and self._any_retired(tx, crawl, look=True):
                    # a run's start URLs bring their retired pages back (after an outage
                    # that answered 404, say)
                    p = {"crawl": crawl, "urls": [r["url"] for r in rows], "now": now}
                    tx.run("revive_linked", p)
                return added

        return self._run(go)

    @staticmethod
    def _link(crawl: str, u: NewUrl, now: float | None) -> dict[str, Any]:
        return {"crawl": crawl, "url": u.url, "depth": u.depth, "callback": u.callback,
                "priority": u.priority, "request": u.request, "now": now}  # fmt: skip

    def lease(
        self,
        crawl: str,
        owner: str,
        limit: int,
        lease_seconds: float,
        *,
        politeness: Politeness | None = None,
    ) -> list[Lease]:
        if limit <= 0:
            return []

        def go() -> list[Lease]:
            with self._write() as tx:
                return self._lease_in(tx, crawl, owner, limit, lease_seconds, politeness)

        return self._run(go)

    def _lease_in(
        self,
        tx: Tx,
        crawl: str,
        owner: str,
        limit: int,
        lease_seconds: float,
        politeness: Politeness | None,
    ) -> list[Lease]:
        """Lease inside the caller's write transaction, recording one grant per URL."""
        if limit <= 0:  # and never pass it to SQL: LIMIT -1 means no limit at all in SQLite
            return []
        p = {"crawl": crawl, "owner": owner, "limit": limit, "lease_seconds": lease_seconds,
             "now": self._now()}  # fmt: skip
        if politeness is not None and (politeness.active or self._host_delays(tx, crawl)):
            crawl_paused, origins_paused = self._claim_gate(tx, crawl)
            if crawl_paused:
                return []
            rows = self._claim_politely(tx, p, politeness, paused=origins_paused)
        else:
            # The fast claim grants nothing while the crawl or an origin of it is paused
            # (its SQL reads the gate); only then is it worth asking which.
            rows = self._claim_due(tx, p)
            if not rows:
                crawl_paused, origins_paused = self._claim_gate(tx, crawl)
                if origins_paused and not crawl_paused:
                    rows = self._claim_politely(tx, p, politeness or Politeness(), paused=True)
        rows.sort(key=lambda r: (-r[5], r[0]))  # RETURNING does not keep the order
        return [
            Lease(fid, url, depth, n, cb, grant, request, jar or 0, bool(listed), seen)
            for fid, url, depth, n, cb, _, request, grant, jar, listed, seen in rows
        ]

    def _claim_politely(
        self, tx: Tx, p: Params, politeness: Politeness, *, paused: bool = False
    ) -> list[Claimed]:
        """A claim that keeps every origin within ``politeness`` for all workers: the
        origins' rows are locked (in order) while their leases are counted, so two
        claims never both take an origin's last slot. With ``paused``, URLs of paused
        origins are not granted, and those pending are moved out of the due set."""
        scan = {**p, "scan": 8 * int(p["limit"]) + 16}
        candidates = tx.rows("claim_candidates", scan)
        if paused:
            paused_origins = self._paused_origins(tx, p["crawl"])
            for scans in range(1, PAUSED_SCANS + 1):
                candidates, shifted = split_paused(candidates, paused_origins)
                self._shift_out(tx, shifted)
                if candidates or len(shifted) < scan["scan"] or scans == PAUSED_SCANS:
                    break
                # All the scan held were of paused origins (links found since the pause):
                # they are out of the due set now, so the next scan sees further.
                candidates = tx.rows("claim_candidates", scan)
        if not candidates:
            return []
        origins = sorted({origin_of(url) for _, url in candidates})
        q = {"crawl": p["crawl"], "now": p["now"], "origins": origins}
        tx.many("add_host", [{"crawl": p["crawl"], "origin": o} for o in origins])
        hosts = {o: (delay, wait) for o, delay, wait in tx.rows("lock_hosts", q)}
        held = [url for (url,) in tx.rows("held_urls", q)]
        chosen, spaced = choose_politely(candidates, held, hosts, politeness, int(p["limit"]))
        if spaced:
            rows = [{"crawl": p["crawl"], "origin": o, "delay": d, "now": p["now"]}
                    for o, d in spaced.items()]  # fmt: skip
            tx.many("space_host", rows)
        return self._claim_ids(tx, p, chosen) if chosen else []

    def renew(self, crawl: str, leases: Sequence[Lease], lease_seconds: float) -> list[Lease]:
        if not leases:
            return []
        p = {"ids": [x.frontier_id for x in leases], "grants": [x.grant_id for x in leases],
             "lease_seconds": lease_seconds}  # fmt: skip

        def go() -> set[int]:
            with self._write() as tx:
                return {r[0] for r in tx.rows("renew_leases", {**p, "now": self._now()})}

        held = self._run(go)
        return [x for x in leases if x.grant_id not in held]

    def release(self, crawl: str, leases: Iterable[tuple[Lease, bool]]) -> None:
        items = list(leases)
        if not items:
            return
        urls = [{"fetched": int(f), "id": x.frontier_id, "grant": x.grant_id} for x, f in items]
        grants = [{"outcome": "abandoned" if f else "released", "grant": x.grant_id}
                  for x, f in items]  # fmt: skip

        def go() -> None:
            with self._write() as tx:
                tx.many("release_url", urls)
                tx.many("release_grant", grants)

        self._run(go)

    def _apply(
        self, tx: Tx, crawl: str, pages: Sequence[PageOutcome], *, checked: bool
    ) -> list[bool]:
        """Write ``pages`` in the caller's transaction; return per page whether it was
        refused as stale (its lease is no longer the current grant: nothing written).

        ``checked`` looks the current grants up first. Without it every page is taken to
        be current, and :class:`StaleInGroup` is raised (the caller rolls back) if one
        fenced state update matches no row: one query less for the common case.
        """
        if not pages:
            return []
        now = self._now()
        current: dict[int, int] = {}
        if checked:
            ids = [p.lease.frontier_id for p in pages]
            current = dict(tx.rows("current_grants", {"ids": ids}))
        records: list[dict[str, Any]] = []
        links: list[dict[str, Any]] = []
        done: list[dict[str, Any]] = []
        retry: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        grants: list[dict[str, Any]] = []
        held: list[dict[str, Any]] = []
        cookies: list[dict[str, Any]] = []
        files: list[dict[str, Any]] = []
        rendered: dict[str, list[int]] = {}
        touched: list[dict[str, Any]] = []
        changed: list[dict[str, Any]] = []  # sitemap <lastmod>s: due at once if newer
        listing: list[dict[str, Any]] = []  # (page, record) of the pages parsed
        dropped: list[dict[str, Any]] = []  # pages parsed again, with the ids they yield
        stale: list[bool] = []
        for p in pages:
            fid, grant = p.lease.frontier_id, p.lease.grant_id
            if checked and current.pop(fid, None) != grant:  # (pop: the same lease twice)
                stale.append(True)
                continue
            stale.append(False)
            # (a page refused before its request that an errback made done keeps "done":
            # the run's figures find its records by it)
            outcome = "refused" if not p.sent and p.kind == "failed" else p.kind
            grants.append({"outcome": outcome, "grant": grant})
            error = None if p.error is None else storable(p.error)
            row = {"status": p.http_status, "error": error, "now": now, "id": fid,
                   "grant": grant, "outcome": outcome}  # fmt: skip
            if p.kind == "done" or p.kind == "skipped":
                # (an errback's outcome, done with the failure as its error, is no parse of
                # the page: what it yields is listed, what the page listed is kept)
                made_by_errback = p.error is not None and p.http_status not in _ANSWERS
                parsed = (
                    p.revisit is None and p.http_status not in _SAYS_NOTHING
                    and not made_by_errback
                )  # fmt: skip
                listed_now = True if p.records else None  # (None: the listing as it was)
                # (a page found the same was not parsed: its link counts are kept)
                counts = (p.links_skipped, p.links_cut, p.links_offsite)
                skipped, cut, offsite = (None,) * 3 if p.revisit is not None else counts
                done.append({**row, "links_skipped": skipped, "links_cut": cut,
                             "links_offsite": offsite,
                             "validators": p.validators, "revisit": p.revisit,
                             "body_bytes": p.body_bytes, "revisit_in": p.revisit_in,
                             "listed": bool(p.records) if parsed else listed_now})  # fmt: skip
                changed += [{"crawl": crawl, "url": u.url, "changed_at": u.changed_at,
                             "now": now} for u in p.links if u.changed_at is not None]  # fmt: skip
                touched += [{"crawl": crawl, "id": rid, "page": fid, "now": now}
                            for rid in p.kept]  # fmt: skip
                if parsed or p.records:
                    yielded = {r.id for r in p.records}
                    listing += [{"crawl": crawl, "id": rid, "page": fid} for rid in yielded]
                    if parsed and p.lease.listed:  # parsed again: it may have dropped records
                        dropped.append(
                            {"crawl": crawl, "page": fid, "ids": json.dumps(sorted(yielded))}
                        )
                records += [
                    {"crawl": crawl, "id": r.id, "source": r.source, "key": r.key,
                     "key_json": r.key_json, "is_item": r.is_item, "url": r.url,
                     "hash": r.content_hash, "data_exact": r.data_exact,
                     "data": r.data_json, "now": now, "page": fid}
                    for r in p.records
                ]  # fmt: skip
                files += [
                    {"crawl": crawl, "sha256": f.sha256, "size": f.size,
                     "content_type": f.content_type, "url": storable(f.url), "now": now}
                    for f in p.files
                ]  # fmt: skip
                links += [self._link(crawl, u, now) for u in p.links]
                cookies += [
                    {"crawl": crawl, "domain": c.domain, "path": c.path, "name": c.name,
                     "url": storable(c.url), "header": storable(c.header), "now": now}
                    for c in p.cookies
                ]  # fmt: skip
                if p.render is not None:
                    rendered.setdefault(p.render[0], [0, 0])[int(p.render[1])] += 1
            elif p.kind == "retry" or p.kind == "deferred":
                counted = int(p.kind == "retry")
                retry.append({**row, "counted": counted, "retry_in": p.retry_in})
                if p.kind == "deferred":
                    held.append(self._origin_range(crawl, p.lease.url, p.retry_in, now))
            else:
                failed.append({**row, "revisit_in": p.revisit_in})
        # The fenced state updates first: nothing else of a stale page may be written.
        for name, rows in (("mark_done", done), ("mark_retry", retry), ("mark_failed", failed)):
            if not rows:
                continue
            if not checked:
                tx.fenced(name, rows)  # (and the grants' outcomes: no one else writes those)
            elif tx.many(name, rows) != len(rows):  # the grants were read in this transaction
                raise StoreError("a fenced update missed a row that was current")
        if checked:
            tx.many("set_grant_outcome", grants)
        # Rows other workers may write too (a record on two pages, a link found twice)
        # go in one order everywhere, so two group commits never wait on each other in
        # a circle (PostgreSQL would abort one as a deadlock).
        if records:
            # One row per record: a record two pages of the group yield is written as
            # the later page has it (one statement cannot write a row twice).
            records = sorted({r["id"]: r for r in records}.values(), key=_by_id)
            tx.many("upsert_record", records)
        if touched:  # (after the records: one of them may be written by this group too)
            touched = sorted({r["id"]: r for r in touched}.values(), key=_by_id)
            tx.many("yield_again", touched)
        if listing:  # each parsed page's listing (schema 0013), its own rows only
            tx.many("list_records", sorted(listing, key=_by_id))
        if dropped:
            tx.many("take_dropped", dropped)
            tx.many("unlist_dropped", dropped)
        if files:
            tx.many("put_file", sorted({f["sha256"]: f for f in files}.values(), key=_by_sha))
        if any(row["status"] in (404, 410) for row in done):  # (it may retire a page)
            self._may_retire(crawl)
        if links:
            links.sort(key=_by_url)
            tx.many("enqueue_url", links)
            if self._any_retired(tx, crawl):  # (links to retired pages bring them back)
                urls = [link["url"] for link in links]
                tx.run("revive_linked", {"crawl": crawl, "urls": urls, "now": now})
        if changed:
            changed.sort(key=_by_url)
            tx.many("revisit_changed", changed)
        if cookies:
            # The last one set wins (one statement cannot write a row twice), in one order.
            latest = {(c["domain"], c["path"], c["name"]): c for c in cookies}
            tx.many("put_cookie", [latest[k] for k in sorted(latest)])
            tx.many("bump_cookie_jar", [{"crawl": crawl}])
        if rendered:
            tx.many("count_render", [
                {"crawl": crawl, "pattern": storable(pattern), "http": http, "browser": browser}
                for pattern, (http, browser) in sorted(rendered.items())
            ])  # fmt: skip
        if held:
            tx.many("hold_back_origin", held)
        refused = [p.lease.grant_id for p, was in zip(pages, stale, strict=True) if was]
        if refused:
            # Only a grant that has no outcome yet: a commit retried after its answer was
            # lost (a dropped connection) finds its own done page, which stays done.
            tx.many("mark_grant_stale", [{"grant": g} for g in refused])
        return stale

    @staticmethod
    def _origin_range(crawl: str, url: str, retry_in: float, now: float | None) -> dict[str, Any]:
        """``hold_back_origin``'s parameters for the origin of canonical ``url``: every
        URL of origin O sorts between "O/" and "O0"."""
        origin = origin_of(url)
        return {"crawl": crawl, "origin": origin, "low": origin + "/", "high": origin + "0",
                "retry_in": retry_in, "now": now}  # fmt: skip

    def commit_pages(self, crawl: str, outcomes: Sequence[PageOutcome]) -> list[str | None]:
        errors, _ = self.commit_and_lease(crawl, outcomes, owner="", limit=0, lease_seconds=0)
        return errors

    def commit_and_lease(
        self,
        crawl: str,
        outcomes: Sequence[PageOutcome],
        *,
        owner: str,
        limit: int,
        lease_seconds: float,
        politeness: Politeness | None = None,
    ) -> tuple[list[str | None], list[Lease]]:
        if not outcomes and limit <= 0:
            return [], []

        def lease(tx: Tx, n: int) -> list[Lease]:
            return self._lease_in(tx, crawl, owner, n, lease_seconds, politeness)

        def go() -> tuple[list[str | None], list[Lease]]:
            # Fast path: the whole group in one go, every lease taken to be current. If
            # one is not (stale), or anything fails (the database, or a value it cannot
            # take), redo page by page under savepoints, grants checked first, so one bad
            # page cannot take its neighbours down.
            try:
                with self._write_group() as tx:
                    self._apply(tx, crawl, outcomes, checked=False)
                    return [None] * len(outcomes), lease(tx, limit)
            except Exception as exc:
                if not outcomes or not self._page_fault(exc):
                    raise
            errors: list[str | None] = []
            with self._write() as tx:
                for page in outcomes:
                    try:
                        with tx.savepoint():
                            [was_stale] = self._apply(tx, crawl, [page], checked=True)
                    except Exception as exc:
                        if not self._page_fault(exc):
                            raise
                        reason = f"{type(exc).__name__}: {exc}"
                        errors.append(storable(f"{page.lease.url}: cannot be stored: {reason}"))
                    else:
                        errors.append(STALE if was_stale else None)
                # A page that failed to commit keeps its slot until its failure is stored.
                kept = sum(1 for error in errors if error is not None and error != STALE)
                return errors, lease(tx, limit - kept)

        return self._run(go)

    def tend_wal(self, *, at_least: int | None = None) -> WalState | None:
        """SQLite checkpoints and truncates its WAL (``sqlite.py``); nothing to do here."""
        return None

    def _page_fault(self, exc: Exception) -> bool:
        """Whether ``exc`` may be one page's fault (a value the database refuses), so the
        group is worth redoing page by page; a lost connection is not."""
        return True

    def due(self, crawl: str) -> Due:
        def go() -> Due:
            with self._read() as tx:
                waits = tx.rows("due_in", {"crawl": crawl, "now": self._now()})
            pending, leased, host = waits[0]
            if pending is None and leased is None:
                return Due(open=False, wait=None)
            times = [t for t in (pending, leased) if t is not None]
            wait = max(0.0, min(times))
            if wait == 0 and host is not None:
                wait = host  # due, unless its origin is waiting for a politeness delay
            return Due(open=True, wait=wait)

        return self._run(go)

    def cookies(self, crawl: str) -> StoredCookies:
        def go() -> StoredCookies:
            p = {"crawl": crawl}
            with self._read() as tx:  # one snapshot: the version of the rows read
                version = first(tx.rows("cookie_jar_version", p)) or 0
                rows = [(url, header) for url, header in tx.rows("list_cookies", p)]
            return StoredCookies(rows, version)

        return self._run(go)

    def validators(self, crawl: str, ids: Sequence[int]) -> dict[int, str]:
        def go() -> dict[int, str]:
            with self._read() as tx:
                rows = tx.rows("page_validators", {"ids": list(ids)})
            return {int(fid): text for fid, text in rows}

        return self._run(go)

    def pass_revisits(self, crawl: str) -> dict[str, tuple[int, int]]:
        def go() -> dict[str, tuple[int, int]]:
            with self._read() as tx:
                rows = tx.rows("pass_revisits", {"crawl": crawl})
            return {how: (int(n), int(size)) for how, n, size in rows}

        return self._run(go)

    def render_patterns(self, crawl: str) -> dict[str, tuple[int, int]]:
        def go() -> dict[str, tuple[int, int]]:
            with self._read() as tx:
                rows = tx.rows("list_render_patterns", {"crawl": crawl})
            return {pattern: (int(http), int(browser)) for pattern, http, browser in rows}

        return self._run(go)

    # -- reading -------------------------------------------------------------------------
    def crawls(self) -> list[str]:
        def go() -> list[str]:
            with self._read() as tx:
                return [r[0] for r in tx.rows("list_crawls", {})]

        return self._run(go)

    def stats(self, crawl: str) -> CrawlStats:
        def go() -> CrawlStats:
            p = {"crawl": crawl}
            with self._read() as tx:  # one snapshot for every count: workers commit meanwhile
                return crawl_stats(
                    crawl,
                    states=dict(tx.rows("count_states", p)),
                    records=first(tx.rows("count_records", p)),
                    outcomes=dict(tx.rows("count_grants", p)),
                    active=first(tx.rows("count_active_grants", p)),
                    links=tx.rows("count_links_skipped", p)[0],
                )

        return self._run(go)

    def failed(self, crawl: str | None = None) -> list[FailedUrl]:
        def go() -> list[FailedUrl]:
            with self._read() as tx:
                return [FailedUrl(*row) for row in tx.rows("list_failed", {"crawl": crawl})]

        return self._run(go)

    def retry_failed(
        self,
        crawl: str | None = None,
        *,
        actor: str | None = None,
        urls: Sequence[str] | None = None,
    ) -> int:
        if urls is not None and crawl is None:
            raise ValueError("retry_failed: urls= needs the crawl they are of")

        def go() -> int:
            with self._write() as tx:
                if urls is None:
                    n = tx.run("requeue_failed", {"crawl": crawl})
                else:
                    n = tx.run("requeue_urls", {"crawl": crawl, "urls": list(urls)})
                if actor is not None and n:
                    target = None if urls is None else urls[0] if len(urls) == 1 else None
                    self._audit(tx, crawl or "*", "retry", target, actor, f"{n} URL(s)")
                return n

        return self._run(go)

    #: Records read per transaction by :meth:`iter_records`.
    read_page = 1000

    def iter_records(
        self, crawl: str | None = None, *, since: float | None = None, changed_only: bool = False
    ) -> Iterator[StoredRecord]:
        """Records by crawl, then id. Read a page at a time, each page its own short
        transaction: a reader that waits on its consumer (a pipe nobody reads) holds no
        snapshot, so SQLite's WAL can still be checkpointed and PostgreSQL can vacuum.
        Every record that exists from start to end is read once; one written meanwhile
        may or may not be."""
        for name in [crawl] if crawl is not None else self.crawls():
            p = {"crawl": name, "since": since or 0.0, "feed": since is not None,
                 "changed_only": changed_only, "limit": self.read_page, "after": ""}  # fmt: skip
            while True:

                def go(params: dict[str, Any] = p) -> list[tuple[Any, ...]]:
                    with self._read() as tx:
                        return tx.rows("iter_records", params)

                rows = self._run(go)
                for row in rows:
                    yield self._stored_record(*row)
                if len(rows) < self.read_page:
                    break
                p["after"] = rows[-1][1]

    def find_records(self, crawl: str, text: str, *, limit: int = 50) -> list[StoredRecord]:
        """Records of ``crawl`` whose key holds ``text``, gone ones too, by key."""

        def go() -> list[tuple[Any, ...]]:
            with self._read() as tx:
                return tx.rows("find_records", {"crawl": crawl, "text": text, "limit": limit})

        return [self._stored_record(*row) for row in self._run(go)]

    def record_versions(
        self, crawl: str, record_id: str, *, limit: int = 100
    ) -> list[tuple[int, str, float, Any]]:
        """``(version, event type, when, data)`` of a record's versions, oldest first, as
        its outbox events hold them."""

        def go() -> list[tuple[Any, ...]]:
            with self._read() as tx:
                p = {"crawl": crawl, "id": record_id, "limit": limit}
                return tx.rows("record_versions", p)

        return [(v, kind, at, json.loads(data)) for v, kind, at, data in self._run(go)]

    def iter_versions(
        self, crawl: str, *, keys: Collection[str] | None = None
    ) -> Iterator[tuple[StoredRecord, str]]:
        """Every version stored of ``crawl``'s records (of those whose key is in ``keys``),
        gone ones too, by record id then version: each ``(record as it was then,
        event)``, the event ``created``, ``updated`` or ``gone``, its ``last_changed``
        when that version was made. The versions before the current one come from the
        outbox, as far back as its retention (``prune_outbox``), their data as JSON holds
        it (a split surrogate pair reads as the one character it makes); the current one
        is the record itself, exact. The outbox is read for the records wanted only."""
        batch: list[StoredRecord] = []
        for record in self.iter_records(crawl, since=0.0):
            if keys is not None and record.key not in keys:
                continue
            batch.append(record)
            if len(batch) == self.read_page:
                yield from self._versions(crawl, batch)
                batch = []
        yield from self._versions(crawl, batch)

    def _versions(
        self, crawl: str, records: list[StoredRecord]
    ) -> Iterator[tuple[StoredRecord, str]]:
        if not records:
            return

        def go() -> list[tuple[Any, ...]]:
            with self._read() as tx:
                return tx.rows("versions_of", {"crawl": crawl, "ids": [r.id for r in records]})

        earlier: dict[str, dict[int, tuple[str, float, str | None, str]]] = {}
        for rid, version, kind, at, url, data in self._run(go):
            earlier.setdefault(rid, {}).setdefault(version, (kind, at, url, data))
        for r in records:
            for version, (kind, at, url, data) in sorted(earlier.get(r.id, {}).items()):
                if version < r.version:
                    gone = at if kind == "record.gone" else None
                    then = replace(r, version=version, data=json.loads(data), url=url,
                                   last_changed=at, gone_at=gone)  # fmt: skip
                    yield then, kind.removeprefix("record.")
            now = "gone" if r.gone_at is not None else "created" if r.version == 1 else "updated"
            yield r, now

    def _stored_record(
        self,
        crawl: str,
        id_: str,
        source: str,
        key: str,
        key_json: str | None,
        url: str | None,
        version: int,
        first_seen: float,
        last_changed: float,
        data: str,
        gone_at: float | None,
        is_item: bool,
        tagged: bool,
    ) -> StoredRecord:
        try:
            value = untagged(data) if tagged else json.loads(data)
            if key_json is not None:
                key = key_from_code_points(key_json)
        except (ValueError, TypeError) as exc:  # written by something else than crashsafe
            raise StoreError(
                f"{masked(self.url)}: record {id_} of crawl {crawl!r} holds data that is not "
                f"JSON ({exc}); fix or delete that row"
            ) from exc
        return StoredRecord(
            crawl,
            id_,
            source,
            key,
            url,
            version,
            first_seen,
            last_changed,
            value,
            gone_at,
            bool(is_item),
        )
