-- Named queries for the PostgreSQL store; store/postgres.py runs them, store/core.py
-- names them. Times are timestamptz; crashsafe_now(%(now)s) is the database's clock
-- unless the caller injects one. Durations cross as seconds (float8), lists as arrays.
-- Rows other workers are claiming are skipped (FOR UPDATE SKIP LOCKED), never waited for.
-- Rows looked up by id say "(state = 'leased') IS TRUE": with state = 'leased' the
-- planner may walk the whole frontier_leased index instead of the ids (its statistics,
-- taken while few rows were leased, make it look tiny), and that index keeps an entry
-- for every URL leased since vacuum last ran: 7 200 buffers and 59 ms a commit of 16
-- pages while a long transaction held vacuum back (benchmarks/frontier_scaling.py
-- --held-snapshot; auto_explain). IS TRUE is the same test for a column that is never
-- NULL, and no index predicate is proved from it.

-- name: enqueue_url
-- many: every parameter is an array, one element per row (store/postgres.py).
INSERT INTO frontier (crawl, url, url_hash, origin, depth, callback, priority, request,
                      added_at)
SELECT crawl, url, sha256(convert_to(url, 'UTF8')),
       split_part(url, '/', 1) || '//' || split_part(url, '/', 3),  -- store/hosts.py's origin_of
       depth, callback, priority, request, crashsafe_now(now)
FROM unnest(%(crawl)s::text[], %(url)s::text[], %(depth)s::int[], %(callback)s::text[],
            %(priority)s::bigint[], %(request)s::text[], %(now)s::float8[])
     AS u(crawl, url, depth, callback, priority, request, now)
ON CONFLICT (url_hash, crawl) DO NOTHING;

-- name: claim_due
-- Lapsed leases first (the grant that lapsed may have fetched: it counts an attempt),
-- then pending URLs by priority, then in the order they were found; one grant each.
-- The frontier rows are updated by id = ANY(picked ids): an index scan (a join on the
-- CTE made the planner hash the whole frontier, 25 ms at 100 000 URLs).
WITH lapsed AS (
    SELECT id FROM frontier
    WHERE crawl = %(crawl)s AND state = 'leased' AND lease_expires < crashsafe_now(%(now)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT id FROM frontier
    WHERE crawl = %(crawl)s AND state = 'pending'
      AND next_attempt_at <= crashsafe_now(%(now)s)
    ORDER BY priority DESC, id
    LIMIT %(limit)s  -- a plain bound: an expression here made the planner sort them all
    FOR UPDATE SKIP LOCKED
), picked AS (
    -- Nothing while the crawl or an origin of it is paused (then the claim asks which:
    -- store/sql_control.py); the gate is read once, before any row is locked.
    SELECT coalesce(array_agg(id), '{}') AS ids
    FROM (SELECT id FROM (SELECT id FROM lapsed UNION ALL SELECT id FROM fresh) AS due
          WHERE NOT EXISTS (SELECT 1 FROM controls
                            WHERE crawl = %(crawl)s
                              AND (paused_at IS NOT NULL OR origins_paused > 0))
          LIMIT %(limit)s) AS taken
), granted AS (
    INSERT INTO lease_grants (crawl, frontier_id, owner, granted_at)
    SELECT %(crawl)s, unnest(ids), %(owner)s, crashsafe_now(%(now)s) FROM picked
    RETURNING id, frontier_id
)
UPDATE frontier f
SET state = 'leased', lease_owner = %(owner)s, grant_id = g.id,
    lease_expires = crashsafe_now(%(now)s) + make_interval(secs => %(lease_seconds)s::float8),
    attempts = f.attempts + (f.state = 'leased')::int
FROM granted g
WHERE f.id = ANY((SELECT ids FROM picked)::bigint[]) AND f.id = g.frontier_id
RETURNING f.id, f.url, f.depth, f.attempts, f.callback, f.priority, f.request, g.id,
          (SELECT version FROM cookie_jars WHERE crawl = %(crawl)s), f.listed, f.validators;

-- name: claim_after
-- claim_due for a worker that knows where it stopped (store/postgres_cursors.py): in each
-- priority it knows, the pending URLs after the last one it was granted there. The index
-- entries of the URLs claimed before are not walked again: while a long transaction holds
-- back vacuum, claim_due walks past every one of them (a SKIP LOCKED queue's known
-- failure), this reads about what it grants. What lies behind a cursor (a retry, a URL
-- given back, another priority) waits for the next claim_due, at most a few seconds.
-- /*bands*/ becomes one claim_after_band per priority (band0 AS (...), ...) and fresh,
-- their union. This statement only picks (and locks) the URLs, for claim_picked to grant
-- in the same transaction: it is planned with its values each time (not prepared: a
-- generic plan does not know that a priority is rare, and with statistics older than the
-- rare priority walked the primary key past every later URL of the table, 77 ms), while
-- the grant, whose plan depends on no value, is prepared (planning the two as one
-- statement took a third of the server's time of a page commit).
WITH /*bands*/
SELECT set_config('crashsafe.picked', coalesce(array_agg(id), '{}')::text, true)
FROM (SELECT id FROM fresh
      WHERE NOT EXISTS (SELECT 1 FROM controls
                        WHERE crawl = %(crawl)s
                          AND (paused_at IS NOT NULL OR origins_paused > 0))
      ORDER BY priority DESC, id
      LIMIT %(limit)s) AS taken;

-- name: claim_picked
-- The URLs claim_after picked in this transaction (a setting local to it).
WITH picked AS (
    SELECT coalesce(nullif(current_setting('crashsafe.picked', true), ''), '{}')::bigint[]
           AS ids
)
-- (then claim_due's grant, from "), granted AS (" on: store/postgres.py adds it)

-- name: claim_after_band
SELECT id, priority FROM frontier
WHERE crawl = %(crawl)s AND state = 'pending' AND priority = %(band)s
  AND id > %(after)s AND next_attempt_at <= crashsafe_now(%(now)s)
ORDER BY priority DESC, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED

-- name: claim_ids
-- The URLs a polite claim chose (already locked by its claim_candidates).
WITH picked AS (
    SELECT coalesce(array_agg(id), '{}') AS ids FROM frontier
    WHERE id = ANY(%(ids)s::bigint[])
      AND ((state = 'pending' AND next_attempt_at <= crashsafe_now(%(now)s))
           OR (state = 'leased' AND lease_expires < crashsafe_now(%(now)s)))
), granted AS (
    INSERT INTO lease_grants (crawl, frontier_id, owner, granted_at)
    SELECT %(crawl)s, unnest(ids), %(owner)s, crashsafe_now(%(now)s) FROM picked
    RETURNING id, frontier_id
)
UPDATE frontier f
SET state = 'leased', lease_owner = %(owner)s, grant_id = g.id,
    lease_expires = crashsafe_now(%(now)s) + make_interval(secs => %(lease_seconds)s::float8),
    attempts = f.attempts + (f.state = 'leased')::int
FROM granted g
WHERE f.id = ANY(%(ids)s::bigint[]) AND f.id = g.frontier_id
RETURNING f.id, f.url, f.depth, f.attempts, f.callback, f.priority, f.request, g.id,
          (SELECT version FROM cookie_jars WHERE crawl = %(crawl)s), f.listed, f.validators;

-- name: claim_candidates
-- What a polite claim chooses from (store/hosts.py): due URLs in the order they are due.
WITH lapsed AS (
    SELECT id, url FROM frontier
    WHERE crawl = %(crawl)s AND state = 'leased' AND lease_expires < crashsafe_now(%(now)s)
    LIMIT %(scan)s
    FOR UPDATE SKIP LOCKED
), fresh AS (
    SELECT id, url, priority FROM frontier
    WHERE crawl = %(crawl)s AND state = 'pending'
      AND next_attempt_at <= crashsafe_now(%(now)s)
    ORDER BY priority DESC, id
    LIMIT %(scan)s
    FOR UPDATE SKIP LOCKED
)
SELECT id, url FROM (
    SELECT 0 AS k, NULL::bigint AS priority, id, url FROM lapsed
    UNION ALL
    SELECT 1, priority, id, url FROM fresh
) AS due
ORDER BY k, priority DESC, id
LIMIT %(scan)s;

-- name: held_urls
SELECT url FROM frontier
WHERE crawl = %(crawl)s AND origin = ANY(%(origins)s::text[]) AND state = 'leased'
  AND lease_expires >= crashsafe_now(%(now)s);

-- name: any_host_delay
SELECT 1 FROM hosts WHERE crawl = %(crawl)s AND delay > 0 LIMIT 1;

-- name: add_host
-- many
INSERT INTO hosts (crawl, origin)
SELECT * FROM unnest(%(crawl)s::text[], %(origin)s::text[])
ON CONFLICT DO NOTHING;

-- name: lock_hosts
-- Held until the claim commits: two claims never both count an origin's last slot free.
-- In origin order, like every claim, so two claims never wait on each other in a circle.
SELECT origin, delay,
       greatest(0, extract(epoch FROM next_at - crashsafe_now(%(now)s)))::float8
FROM hosts
WHERE crawl = %(crawl)s AND origin = ANY(%(origins)s::text[])
ORDER BY origin
FOR UPDATE;

-- name: space_host
-- many
UPDATE hosts h
SET next_at = crashsafe_now(u.now) + make_interval(secs => u.delay)
FROM unnest(%(crawl)s::text[], %(origin)s::text[], %(delay)s::float8[], %(now)s::float8[])
     AS u(crawl, origin, delay, now)
WHERE h.crawl = u.crawl AND h.origin = u.origin;

-- name: set_host_delay
UPDATE hosts SET delay = %(delay)s WHERE crawl = %(crawl)s AND origin = %(origin)s;

-- name: renew_leases
-- Fenced: only grants that are still current are extended.
UPDATE frontier
SET lease_expires = crashsafe_now(%(now)s) + make_interval(secs => %(lease_seconds)s::float8)
WHERE id = ANY(%(ids)s::bigint[]) AND grant_id = ANY(%(grants)s::bigint[])
  AND (state = 'leased') IS TRUE
RETURNING grant_id;

-- name: current_grants
-- Locked: until the page's transaction ends no other worker can take these URLs over.
SELECT id, grant_id FROM frontier
WHERE id = ANY(%(ids)s::bigint[]) AND (state = 'leased') IS TRUE
FOR UPDATE;

-- name: release_url
-- many. The flag says whether a request was made: then it counts an attempt.
UPDATE frontier f
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = f.attempts + u.fetched
FROM unnest(%(fetched)s::int[], %(id)s::bigint[], %(grant)s::bigint[]) AS u(fetched, id, g)
WHERE f.id = ANY(%(id)s::bigint[]) AND f.id = u.id AND f.grant_id = u.g
  AND (f.state = 'leased') IS TRUE;

-- name: release_grant
-- many
UPDATE lease_grants l SET outcome = u.outcome
FROM unnest(%(outcome)s::text[], %(grant)s::bigint[]) AS u(outcome, g)
WHERE l.id = ANY(%(grant)s::bigint[]) AND l.id = u.g AND l.outcome IS NULL;

-- name: set_grant_outcome
-- many
UPDATE lease_grants l SET outcome = u.outcome
FROM unnest(%(outcome)s::text[], %(grant)s::bigint[]) AS u(outcome, g)
WHERE l.id = ANY(%(grant)s::bigint[]) AND l.id = u.g;  -- (ANY: an index scan, never a hash join)

-- name: mark_grant_stale
-- many
UPDATE lease_grants SET outcome = 'stale'
WHERE id = ANY(%(grant)s::bigint[]) AND outcome IS NULL;

-- name: upsert_record
-- many (ids distinct: store/core.py keeps one row per record of a group). A changed
-- record, or a gone one yielded again, is a new version (its outbox event is written by
-- a trigger); a record notes the page and the pass that yielded it last. An unchanged
-- record yielded again in the same pass by the same page writes nothing.
WITH this_pass AS (
    SELECT coalesce(max(pass), 1) AS n FROM passes WHERE crawl = (%(crawl)s::text[])[1]
)
INSERT INTO records (crawl, id, source, key, key_json, is_item, url, content_hash, data,
                     data_exact, first_seen, last_changed, version, page, seen_pass)
SELECT crawl, id, source, key, key_json, is_item, url, hash, data::json, data_exact,
       crashsafe_now(now), crashsafe_now(now), 1, page, (SELECT n FROM this_pass)
FROM unnest(%(crawl)s::text[], %(id)s::text[], %(source)s::text[], %(key)s::text[],
            %(key_json)s::text[], %(is_item)s::boolean[], %(url)s::text[], %(hash)s::text[],
            %(data)s::text[], %(data_exact)s::text[], %(now)s::float8[], %(page)s::bigint[])
     AS u(crawl, id, source, key, key_json, is_item, url, hash, data, data_exact, now, page)
ON CONFLICT (crawl, id) DO UPDATE SET
    key = excluded.key,
    key_json = excluded.key_json,
    is_item = excluded.is_item,
    url = excluded.url,
    content_hash = excluded.content_hash,
    data = excluded.data,
    data_exact = excluded.data_exact,
    last_changed = CASE WHEN records.content_hash <> excluded.content_hash
                          OR records.gone_at IS NOT NULL
                        THEN excluded.last_changed ELSE records.last_changed END,
    version = records.version + (records.content_hash <> excluded.content_hash
                                 OR records.gone_at IS NOT NULL)::int,
    gone_at = NULL,
    page = excluded.page,
    seen_pass = excluded.seen_pass
WHERE records.content_hash <> excluded.content_hash OR records.gone_at IS NOT NULL
   OR records.page IS DISTINCT FROM excluded.page OR records.seen_pass <> excluded.seen_pass
   OR records.key_json IS DISTINCT FROM excluded.key_json OR records.is_item <> excluded.is_item;

-- name: mark_gone
-- At the end of pass %(pass)s (SQLite's query says more): from the pages fetched since
-- the last pass that ended to the records they yielded last.
UPDATE records r
SET gone_at = crashsafe_now(%(now)s), last_changed = crashsafe_now(%(now)s),
    version = r.version + 1
FROM frontier f
WHERE f.crawl = %(crawl)s AND f.state = 'done' AND f.done_pass <= %(pass)s
  AND f.done_pass > (SELECT coalesce(max(pass), 0) FROM pass_figures
                     WHERE crawl = %(crawl)s AND pass < %(pass)s)
  AND f.http_status IS NOT NULL AND f.http_status NOT IN (302, 303, 307)
  AND r.page = f.id AND r.gone_at IS NULL  -- (a page is one crawl's: records_page)
  AND r.seen_pass < f.done_pass
  AND NOT EXISTS (SELECT 1 FROM record_pages rp WHERE rp.crawl = r.crawl AND rp.record = r.id)
  AND NOT EXISTS (
      SELECT 1 FROM frontier WHERE crawl = %(crawl)s AND state IN ('pending', 'leased'));

-- name: mark_done
-- many
UPDATE frontier f
SET state = 'done', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = f.attempts + 1, http_status = u.status, last_error = u.error,
    done_at = crashsafe_now(u.now),
    -- (a page found the same, not parsed: its links as counted when it was)
    links_skipped = coalesce(u.links_skipped, f.links_skipped),
    links_cut = coalesce(u.links_cut, f.links_cut),
    links_offsite = coalesce(u.links_offsite, f.links_offsite),
    done_pass = (SELECT coalesce(max(pass), 1) FROM passes p WHERE p.crawl = f.crawl),
    validators = u.validators, revisit = u.revisit,
    body_bytes = u.body_bytes, listed = coalesce(u.listed, f.listed),
    -- (404/410 answers in a row, not a start URL's; retired at the third: SQLite's 0015)
    gone_streak = CASE WHEN u.status IN (404, 410) AND f.depth > 0 THEN f.gone_streak + 1
                       ELSE 0 END,
    next_visit_at = CASE WHEN u.status IN (404, 410) AND f.depth > 0 AND f.gone_streak >= 2
                         THEN NULL
                         ELSE crashsafe_now(u.now)
                              + make_interval(secs => coalesce(u.revisit_in, 0)) END
FROM unnest(%(status)s::int[], %(error)s::text[], %(now)s::float8[], %(id)s::bigint[],
            %(grant)s::bigint[], %(links_skipped)s::int[], %(links_cut)s::int[],
            %(validators)s::text[], %(revisit)s::text[], %(body_bytes)s::bigint[],
            %(revisit_in)s::float8[], %(listed)s::boolean[], %(links_offsite)s::int[])
     AS u(status, error, now, id, g, links_skipped, links_cut, validators, revisit,
          body_bytes, revisit_in, listed, links_offsite)
WHERE f.id = ANY(%(id)s::bigint[]) AND f.id = u.id AND f.grant_id = u.g
  AND (f.state = 'leased') IS TRUE;

-- name: mark_retry
-- many. Also for a deferred page (robots.txt unreachable): then it adds no attempt.
UPDATE frontier f
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = f.attempts + u.counted, http_status = u.status, last_error = u.error,
    next_attempt_at = crashsafe_now(u.now) + make_interval(secs => u.retry_in)
FROM unnest(%(status)s::int[], %(error)s::text[], %(now)s::float8[], %(id)s::bigint[],
            %(grant)s::bigint[], %(counted)s::int[], %(retry_in)s::float8[])
     AS u(status, error, now, id, g, counted, retry_in)
WHERE f.id = ANY(%(id)s::bigint[]) AND f.id = u.id AND f.grant_id = u.g
  AND (f.state = 'leased') IS TRUE;

-- name: hold_back_origin
-- many. A page deferred for its robots.txt holds back its origin's other pending URLs.
UPDATE frontier f
SET next_attempt_at = greatest(
    f.next_attempt_at, crashsafe_now(u.now) + make_interval(secs => u.retry_in))
FROM unnest(%(crawl)s::text[], %(origin)s::text[], %(retry_in)s::float8[],
            %(now)s::float8[]) AS u(crawl, origin, retry_in, now)
WHERE f.crawl = ANY(%(crawl)s::text[]) AND f.origin = ANY(%(origin)s::text[])
  AND f.crawl = u.crawl AND f.origin = u.origin AND f.state = 'pending';

-- name: mark_failed
-- many
UPDATE frontier f
SET state = 'failed', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = f.attempts + 1, http_status = u.status, last_error = u.error,
    done_at = crashsafe_now(u.now), gone_streak = 0,
    next_visit_at = crashsafe_now(u.now) + make_interval(secs => coalesce(u.revisit_in, 0))
FROM unnest(%(status)s::int[], %(error)s::text[], %(now)s::float8[], %(id)s::bigint[],
            %(grant)s::bigint[], %(revisit_in)s::float8[]) AS u(status, error, now, id, g,
                                                                revisit_in)
WHERE f.id = ANY(%(id)s::bigint[]) AND f.id = u.id AND f.grant_id = u.g
  AND (f.state = 'leased') IS TRUE;

-- name: put_cookie
-- many (keys distinct: store/core.py keeps the last cookie of a group per key)
INSERT INTO cookies (crawl, domain, path, name, url, header, set_at)
SELECT crawl, domain, path, name, url, header, crashsafe_now(now)
FROM unnest(%(crawl)s::text[], %(domain)s::text[], %(path)s::text[], %(name)s::text[],
            %(url)s::text[], %(header)s::text[], %(now)s::float8[])
     AS u(crawl, domain, path, name, url, header, now)
ON CONFLICT (crawl, domain, path, name) DO UPDATE SET
    url = excluded.url, header = excluded.header, set_at = excluded.set_at;

-- name: list_cookies
SELECT url, header FROM cookies WHERE crawl = %(crawl)s ORDER BY set_at, domain, path, name;

-- name: bump_cookie_jar
-- many (one row: the crawl)
INSERT INTO cookie_jars (crawl, version)
SELECT crawl, 1 FROM unnest(%(crawl)s::text[]) AS u(crawl)
ON CONFLICT (crawl) DO UPDATE SET version = cookie_jars.version + 1;

-- name: cookie_jar_version
SELECT version FROM cookie_jars WHERE crawl = %(crawl)s;

-- name: add_worker
INSERT INTO workers (owner, crawl, host, pid, started_at)
VALUES (%(owner)s, %(crawl)s, %(host)s, %(pid)s, crashsafe_now(%(now)s))
ON CONFLICT (owner) DO NOTHING;

-- name: worker_id
SELECT id FROM workers WHERE owner = %(owner)s;

-- name: lock_worker
-- A session lock: it outlives this transaction and dies with the connection.
SELECT pg_advisory_lock(%(space)s, %(id)s);

-- name: unlock_worker
SELECT pg_advisory_unlock(%(space)s, %(id)s);

-- name: live_owners
SELECT w.owner FROM workers w
JOIN pg_locks l
  ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
 AND l.classid = %(space)s::oid AND l.objid = w.id::oid
 AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
WHERE w.owner = ANY(%(owners)s::text[]);

-- name: idle_workers
SELECT owner FROM workers w
WHERE crawl = %(crawl)s AND NOT EXISTS (
    SELECT 1 FROM frontier f
    WHERE f.crawl = w.crawl AND f.state = 'leased' AND f.lease_owner = w.owner
);

-- name: forget_worker
-- many
DELETE FROM workers WHERE owner = ANY(%(owner)s::text[]);

-- name: list_workers
SELECT owner, crawl, host, pid, extract(epoch FROM started_at)::float8,
       extract(epoch FROM coalesce(last_seen, started_at))::float8
FROM workers
WHERE %(crawl)s::text IS NULL OR crawl = %(crawl)s
ORDER BY started_at, owner;

-- name: touch_worker
UPDATE workers SET last_seen = crashsafe_now(%(now)s) WHERE owner = %(owner)s;

-- name: leases_by_owner
SELECT lease_owner, count(*) FROM frontier
WHERE (%(crawl)s::text IS NULL OR crawl = %(crawl)s) AND state = 'leased'
GROUP BY lease_owner;

-- name: pages_by_owner
-- (the grants kept, and those folded into counts: fold_grants)
SELECT owner, sum(n)::bigint FROM (
    SELECT owner, count(*) AS n FROM lease_grants
    WHERE (%(crawl)s::text IS NULL OR crawl = %(crawl)s)
      AND outcome IN ('done', 'skipped', 'retry', 'failed', 'refused')
    GROUP BY owner
    UNION ALL
    SELECT owner, n FROM grant_totals
    WHERE (%(crawl)s::text IS NULL OR crawl = %(crawl)s)
      AND outcome IN ('done', 'skipped', 'retry', 'failed', 'refused')) kept_and_folded
GROUP BY owner;

-- name: lease_owners
SELECT DISTINCT lease_owner FROM frontier
WHERE crawl = %(crawl)s AND state = 'leased' AND lease_owner IS NOT NULL;

-- name: release_owner
-- many. A dead worker's lease: an attempt (it may have fetched). Due again at once the
-- first time; once tried before, after a pause of at least pause seconds or its retry
-- backoff, stretched by up to half at random (see SQLite's queries.sql for why).
UPDATE frontier f
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = f.attempts + 1,
    next_attempt_at = CASE WHEN f.attempts = 0 THEN 'epoch'::timestamptz
        ELSE crashsafe_now(u.now) + make_interval(secs => greatest(u.pause,
            least(u.cap, u.base * power(2, least(f.attempts - 1, 30)))) * (1 + random() / 2))
        END
FROM unnest(%(crawl)s::text[], %(owner)s::text[], %(now)s::float8[], %(base)s::float8[],
            %(cap)s::float8[], %(pause)s::float8[]) AS u(crawl, owner, now, base, cap, pause)
WHERE f.crawl = ANY(%(crawl)s::text[]) AND f.state = 'leased'
  AND f.lease_owner = ANY(%(owner)s::text[]) AND f.crawl = u.crawl AND f.lease_owner = u.owner;

-- name: due_in
-- Seconds until a pending URL is due, until a lease lapses, until an origin held back
-- by a politeness delay may be granted again (NULL: none).
SELECT
    extract(epoch FROM (SELECT min(next_attempt_at) FROM frontier
                        WHERE crawl = %(crawl)s AND state = 'pending')
                       - crashsafe_now(%(now)s))::float8,
    extract(epoch FROM (SELECT min(lease_expires) FROM frontier
                        WHERE crawl = %(crawl)s AND state = 'leased')
                       - crashsafe_now(%(now)s))::float8,
    extract(epoch FROM (SELECT min(next_at) FROM hosts
                        WHERE crawl = %(crawl)s AND next_at > crashsafe_now(%(now)s))
                       - crashsafe_now(%(now)s))::float8;

-- name: list_waiting
-- The origins whose robots.txt is failing, with why, since when, the next try and the
-- pending URLs they hold back.
SELECT r.origin, r.failing_why, extract(epoch FROM r.failing_since)::float8,
       extract(epoch FROM r.retry_at)::float8,
       (SELECT count(*) FROM frontier f
        WHERE f.crawl = r.crawl AND f.state = 'pending' AND f.origin = r.origin)
FROM robots r
WHERE r.crawl = %(crawl)s AND r.failing_since IS NOT NULL
ORDER BY r.origin;

-- name: fetchable
-- Whether a URL is leased, or pending at an origin whose robots.txt is not failing: if
-- not, all that is left waits on unreachable origins. (Stops at the first such URL; only
-- asked while a worker has nothing to do.)
SELECT EXISTS (SELECT 1 FROM frontier WHERE crawl = %(crawl)s AND state = 'leased')
    OR EXISTS (
        SELECT 1 FROM frontier f
        WHERE f.crawl = %(crawl)s AND f.state = 'pending'
          AND NOT EXISTS (
              SELECT 1 FROM robots r
              WHERE r.crawl = f.crawl AND r.origin = f.origin
                AND r.failing_since IS NOT NULL));

-- name: count_states
SELECT state, count(*) FROM frontier WHERE crawl = %(crawl)s GROUP BY state;

-- name: count_links_skipped
SELECT coalesce(sum(links_skipped), 0)::bigint, coalesce(sum(links_cut), 0)::bigint,
       coalesce(sum(links_offsite), 0)::bigint
FROM frontier WHERE crawl = %(crawl)s;

-- name: count_records
SELECT count(*) FROM records WHERE crawl = %(crawl)s AND gone_at IS NULL;

-- name: count_grants
-- (the grants kept, and those folded into counts: fold_grants)
SELECT outcome, sum(n)::bigint FROM (
    SELECT coalesce(outcome, '') AS outcome, count(*) AS n FROM lease_grants
    WHERE crawl = %(crawl)s GROUP BY 1
    UNION ALL
    SELECT outcome, n FROM grant_totals WHERE crawl = %(crawl)s) kept_and_folded
GROUP BY outcome;

-- name: count_active_grants
SELECT count(*) FROM frontier
WHERE crawl = %(crawl)s AND state = 'leased' AND grant_id IS NOT NULL;

-- name: list_crawls
SELECT DISTINCT crawl FROM frontier ORDER BY crawl;

-- name: list_failed
SELECT crawl, url, attempts, http_status, last_error, extract(epoch FROM done_at)::float8
FROM frontier
WHERE state = 'failed' AND (%(crawl)s::text IS NULL OR crawl = %(crawl)s)
ORDER BY crawl, done_at, id;

-- name: requeue_failed
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 'epoch', done_at = NULL
WHERE state = 'failed' AND (%(crawl)s::text IS NULL OR crawl = %(crawl)s);

-- name: iter_records
-- One page of a crawl's live records, in id order after %(after)s (keyset: every page is
-- a short read that holds back no vacuum); with a time (a change feed): those changed
-- since, gone ones too, and with changed_only not those first seen since.
SELECT crawl, id, source, key, key_json, url, version,
       extract(epoch FROM first_seen)::float8, extract(epoch FROM last_changed)::float8,
       coalesce(data_exact, data::text), extract(epoch FROM gone_at)::float8, is_item,
       data_exact IS NOT NULL
FROM records
WHERE crawl = %(crawl)s AND id > %(after)s
  AND last_changed >= to_timestamp(%(since)s::float8)
  AND (gone_at IS NULL OR %(feed)s)
  AND (NOT %(changed_only)s OR first_seen < to_timestamp(%(since)s::float8))
ORDER BY id
LIMIT %(limit)s;

-- name: get_robots
SELECT body,
       extract(epoch FROM crashsafe_now(%(now)s) - fetched_at)::float8,
       extract(epoch FROM crashsafe_now(%(now)s) - failing_since)::float8,
       failures,
       extract(epoch FROM retry_at - crashsafe_now(%(now)s))::float8,
       CASE WHEN claim_owner IS NOT NULL
            THEN extract(epoch FROM claim_until - crashsafe_now(%(now)s))::float8 END
FROM robots WHERE crawl = %(crawl)s AND origin = %(origin)s;

-- name: add_robots
INSERT INTO robots (crawl, origin) VALUES (%(crawl)s, %(origin)s) ON CONFLICT DO NOTHING;

-- name: claim_robots
UPDATE robots
SET claim_owner = %(owner)s,
    claim_until = crashsafe_now(%(now)s) + make_interval(secs => %(seconds)s::float8)
WHERE crawl = %(crawl)s AND origin = %(origin)s
  AND (claim_until IS NULL OR claim_until < crashsafe_now(%(now)s)
       OR claim_owner = %(owner)s);

-- name: robots_claim_owner
SELECT claim_owner FROM robots WHERE crawl = %(crawl)s AND origin = %(origin)s;

-- name: take_robots_claim
UPDATE robots
SET claim_owner = %(owner)s,
    claim_until = crashsafe_now(%(now)s) + make_interval(secs => %(seconds)s::float8)
WHERE crawl = %(crawl)s AND origin = %(origin)s AND claim_owner = %(dead)s;

-- name: put_robots
-- Fenced like a lease: only the holder of the claim writes what it read.
UPDATE robots
SET body = %(body)s,
    fetched_at = crashsafe_now(%(now)s) - make_interval(secs => %(age)s::float8),
    failing_since = NULL, failures = 0, failing_why = NULL, retry_at = NULL,
    claim_owner = NULL, claim_until = NULL
WHERE crawl = %(crawl)s AND origin = %(origin)s AND claim_owner = %(owner)s;

-- name: robots_failed
UPDATE robots
SET failing_since = coalesce(failing_since, crashsafe_now(%(now)s)),
    failures = failures + 1, failing_why = %(why)s,
    retry_at = crashsafe_now(%(now)s) + make_interval(secs => %(retry_in)s::float8),
    claim_owner = NULL, claim_until = NULL
WHERE crawl = %(crawl)s AND origin = %(origin)s AND claim_owner = %(owner)s;

-- name: release_robots
UPDATE robots SET claim_owner = NULL, claim_until = NULL
WHERE crawl = %(crawl)s AND origin = %(origin)s AND claim_owner = %(owner)s;

-- ---------------------------------------------------------------------------------------
-- Recrawls and side effects (store/sql_effects.py)

-- name: requeue_done
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 'epoch', last_error = NULL
WHERE crawl = %(crawl)s AND state = 'done' AND gone_streak < 3
  AND done_at <= crashsafe_now(%(now)s) - make_interval(secs => %(older_than)s::float8);

-- name: requeue_due
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 'epoch', last_error = NULL
WHERE crawl = %(crawl)s AND state = 'done' AND gone_streak < 3
  AND next_visit_at <= crashsafe_now(%(now)s) + make_interval(secs => %(early)s::float8);

-- name: requeue_failed_pages
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 'epoch', last_error = NULL
WHERE crawl = %(crawl)s AND state = 'failed'
  AND (%(all)s OR coalesce(next_visit_at, 'epoch')
                  <= crashsafe_now(%(now)s) + make_interval(secs => %(early)s::float8));

-- name: add_pass
INSERT INTO passes (crawl, pass, started_at, requeued)
VALUES (%(crawl)s, (SELECT coalesce(max(pass), 1) + 1 FROM passes WHERE crawl = %(crawl)s),
        crashsafe_now(%(now)s), %(requeued)s)
RETURNING pass;

-- name: last_pass_at
SELECT extract(epoch FROM max(started_at))::float8 FROM passes WHERE crawl = %(crawl)s;

-- name: effect_counts
WITH last_pass AS (SELECT max(started_at) AS at FROM passes WHERE crawl = %(crawl)s)
SELECT
    (SELECT coalesce(max(pass), 1) FROM passes WHERE crawl = %(crawl)s),
    extract(epoch FROM (SELECT at FROM last_pass))::float8,
    coalesce(sum(version), 0)::bigint,
    count(*) FILTER (WHERE version > 1),
    count(*) FILTER (WHERE gone_at IS NOT NULL),
    count(*) FILTER (WHERE last_changed >= (SELECT at FROM last_pass)
                       AND first_seen < (SELECT at FROM last_pass)),
    (SELECT count(*) FROM files WHERE crawl = %(crawl)s),
    (SELECT coalesce(sum(size), 0)::bigint FROM files WHERE crawl = %(crawl)s),
    -- events: once the crawl has an endpoint every one is written (counted, so a missing
    -- or doubled one shows); before, one per version (not all written yet: 0007)
    CASE WHEN EXISTS (SELECT 1 FROM endpoints WHERE crawl = %(crawl)s)
         THEN (SELECT count(*) FROM outbox WHERE crawl = %(crawl)s)
         ELSE coalesce(sum(version), 0)::bigint END
FROM records WHERE crawl = %(crawl)s;

-- name: count_deliveries
SELECT d.state, count(*) FROM deliveries d JOIN endpoints e ON e.id = d.endpoint
WHERE e.crawl = %(crawl)s GROUP BY d.state;

-- name: high_water
-- The last lease grant so far (identities only grow), and the time.
SELECT (SELECT coalesce(max(id), 0) FROM lease_grants),
       extract(epoch FROM crashsafe_now(%(now)s))::float8;

-- name: requests_after
-- A run's grants after its high-water mark (owner ids start with the run's id) that
-- made a request (stats.py's rule), its folded ones by its owners (SQLite's says more).
SELECT (SELECT count(*) FROM lease_grants g
        WHERE g.id > %(grants)s AND g.crawl = %(crawl)s AND starts_with(g.owner, %(prefix)s)
          AND coalesce(g.outcome, '') NOT IN ('released', 'skipped', 'deferred', 'refused')
          AND NOT (g.outcome IS NULL
                   AND EXISTS (SELECT 1 FROM frontier f
                               WHERE f.id = g.frontier_id AND f.grant_id = g.id)))
     + (SELECT coalesce(sum(n), 0) FROM grant_totals t
        WHERE %(n)s > 0 AND t.crawl = %(crawl)s AND starts_with(t.owner, %(prefix)s)
          AND t.outcome NOT IN ('released', 'skipped', 'deferred', 'refused'));

-- name: records_after
-- The records that changed since the mark (created, updated, gone) whose page was done
-- by one of the run's grants after it: what this run's own commits did.
SELECT count(*) FILTER (WHERE r.gone_at IS NULL AND r.version = 1),
       count(*) FILTER (WHERE r.gone_at IS NULL AND r.version > 1),
       count(*) FILTER (WHERE r.gone_at IS NOT NULL)
FROM records r
WHERE r.crawl = %(crawl)s AND r.last_changed >= to_timestamp(%(at)s)
  AND r.page IN (SELECT frontier_id FROM lease_grants
                 WHERE id > %(grants)s AND crawl = %(crawl)s AND outcome = 'done'
                   AND starts_with(owner, %(prefix)s));

-- name: put_file
-- many
INSERT INTO files (crawl, sha256, size, content_type, url, stored_at)
SELECT crawl, sha256, size, content_type, url, crashsafe_now(now)
FROM unnest(%(crawl)s::text[], %(sha256)s::text[], %(size)s::bigint[],
            %(content_type)s::text[], %(url)s::text[], %(now)s::float8[])
     AS u(crawl, sha256, size, content_type, url, now)
ON CONFLICT DO NOTHING;

-- name: find_endpoint
SELECT id, extract(epoch FROM disabled_at)::float8, disabled_why FROM endpoints
WHERE crawl = %(crawl)s AND url = %(url)s;

-- name: lock_outbox
-- Waits for the page commits writing records (and so events) now, and keeps new ones out
-- until the endpoint, the events not yet written and its backlog commit: no event is
-- missed between the two (0007_events_when_needed.sql).
LOCK TABLE records, outbox IN SHARE ROW EXCLUSIVE MODE;

-- name: add_endpoint
INSERT INTO endpoints (crawl, url, added_at)
VALUES (%(crawl)s, %(url)s, crashsafe_now(%(now)s)) RETURNING id;

-- name: write_missing_events
-- Before a crawl's first endpoint: the events of records made while it had none (each
-- still at version 1: every later version wrote its own), in the order they were made.
INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
SELECT r.crawl, r.id, 1, 'record.created', r.url, r.data, r.first_seen FROM records r
WHERE r.crawl = %(crawl)s AND r.version = 1
  AND NOT EXISTS (SELECT 1 FROM outbox o
                  WHERE o.crawl = r.crawl AND o.record_id = r.id AND o.version = 1)
ORDER BY r.first_seen, r.id;

-- name: add_backlog
INSERT INTO deliveries (endpoint, event)
SELECT %(endpoint)s, id FROM outbox WHERE crawl = %(crawl)s
ON CONFLICT DO NOTHING;

-- name: lease_deliveries
WITH picked AS (
    SELECT event FROM deliveries
    WHERE endpoint = %(endpoint)s
      AND ((state = 'pending' AND next_attempt_at <= crashsafe_now(%(now)s))
           OR (state = 'leased' AND lease_expires < crashsafe_now(%(now)s)))
      AND (SELECT disabled_at FROM endpoints WHERE id = %(endpoint)s) IS NULL
    ORDER BY event
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE deliveries d
SET state = 'leased', lease_owner = %(owner)s, attempts = d.attempts + 1,
    leases = d.leases + 1,
    lease_expires = crashsafe_now(%(now)s) + make_interval(secs => %(lease_seconds)s::float8)
FROM picked
WHERE d.endpoint = %(endpoint)s AND d.event = picked.event
RETURNING d.event, d.attempts, d.leases;

-- name: get_events
SELECT id, crawl, record_id, version, type, url, data::text, extract(epoch FROM at)::float8
FROM outbox WHERE id = ANY(%(ids)s::bigint[]);

-- name: delivered
-- many. Whoever holds it now: the receiver has it.
UPDATE deliveries d
SET state = 'delivered', done_at = crashsafe_now(u.now), last_status = u.status,
    last_error = NULL, lease_owner = NULL, lease_expires = NULL
FROM unnest(%(endpoint)s::bigint[], %(event)s::bigint[], %(status)s::int[],
            %(now)s::float8[]) AS u(endpoint, event, status, now)
WHERE d.endpoint = u.endpoint AND d.event = u.event AND d.state <> 'delivered';

-- name: delivery_retry
-- many
UPDATE deliveries d
SET state = 'pending', last_status = u.status, last_error = u.error,
    next_attempt_at = crashsafe_now(u.now) + make_interval(secs => u.retry_in),
    lease_owner = NULL, lease_expires = NULL
FROM unnest(%(endpoint)s::bigint[], %(event)s::bigint[], %(status)s::int[],
            %(error)s::text[], %(retry_in)s::float8[], %(owner)s::text[],
            %(lease)s::int[], %(now)s::float8[])
     AS u(endpoint, event, status, error, retry_in, owner, lease, now)
WHERE d.endpoint = u.endpoint AND d.event = u.event AND d.state = 'leased'
  AND d.lease_owner = u.owner AND d.leases = u.lease;

-- name: delivery_failed
-- many
UPDATE deliveries d
SET state = 'failed', done_at = crashsafe_now(u.now), last_status = u.status,
    last_error = u.error, lease_owner = NULL, lease_expires = NULL
FROM unnest(%(endpoint)s::bigint[], %(event)s::bigint[], %(status)s::int[],
            %(error)s::text[], %(owner)s::text[], %(lease)s::int[], %(now)s::float8[])
     AS u(endpoint, event, status, error, owner, lease, now)
WHERE d.endpoint = u.endpoint AND d.event = u.event AND d.state = 'leased'
  AND d.lease_owner = u.owner AND d.leases = u.lease;

-- name: disable_endpoint
UPDATE endpoints SET disabled_at = crashsafe_now(%(now)s), disabled_why = %(why)s
WHERE id = %(endpoint)s AND disabled_at IS NULL;

-- name: deliveries_due_in
SELECT
    extract(epoch FROM (SELECT min(next_attempt_at) FROM deliveries
                        WHERE endpoint = %(endpoint)s AND state = 'pending')
                       - crashsafe_now(%(now)s))::float8,
    extract(epoch FROM (SELECT min(lease_expires) FROM deliveries
                        WHERE endpoint = %(endpoint)s AND state = 'leased')
                       - crashsafe_now(%(now)s))::float8;

-- name: list_failed_deliveries
SELECT e.url, o.crawl, o.record_id, o.version, o.type, d.attempts, d.last_status,
       d.last_error, extract(epoch FROM d.done_at)::float8
FROM deliveries d JOIN endpoints e ON e.id = d.endpoint JOIN outbox o ON o.id = d.event
WHERE d.state = 'failed' AND e.crawl = %(crawl)s
  AND (%(url)s::text IS NULL OR e.url = %(url)s)
ORDER BY e.url, d.event;

-- name: replay_failed
UPDATE deliveries
SET state = 'pending', attempts = 0, next_attempt_at = 'epoch', done_at = NULL
WHERE state = 'failed' AND endpoint IN (
    SELECT id FROM endpoints
    WHERE crawl = %(crawl)s AND (%(url)s::text IS NULL OR url = %(url)s));

-- name: enable_endpoints
UPDATE endpoints SET disabled_at = NULL, disabled_why = NULL
WHERE crawl = %(crawl)s AND (%(url)s::text IS NULL OR url = %(url)s)
  AND disabled_at IS NOT NULL;

-- name: count_endpoint_deliveries
SELECT state, count(*) FROM deliveries WHERE endpoint = %(endpoint)s GROUP BY state;

-- name: remove_deliveries
DELETE FROM deliveries
WHERE endpoint IN (SELECT id FROM endpoints WHERE crawl = %(crawl)s AND url = %(url)s);

-- name: remove_endpoint
DELETE FROM endpoints WHERE crawl = %(crawl)s AND url = %(url)s;

-- Steering (store/sql_control.py) ---------------------------------------------------------

-- name: claim_gate
SELECT paused_at IS NOT NULL, origins_paused FROM controls WHERE crawl = %(crawl)s;

-- name: control_of
SELECT extract(epoch FROM paused_at)::float8, paused_by, origins_paused FROM controls
WHERE crawl = %(crawl)s;

-- name: add_control
INSERT INTO controls (crawl) VALUES (%(crawl)s) ON CONFLICT DO NOTHING;

-- name: lock_control
-- Every claim reads the controls table (its gate) and holds that read until it commits:
-- taking the table whole waits for every claim under way, and holds back the claims that
-- come after until this action has committed. So once an action returns, no claim that
-- read the controls before it can still grant anything (a pause is a pause).
LOCK TABLE controls IN ACCESS EXCLUSIVE MODE;

-- name: pause_crawl
UPDATE controls SET paused_at = crashsafe_now(%(now)s), paused_by = %(actor)s
WHERE crawl = %(crawl)s AND paused_at IS NULL;

-- name: resume_crawl
UPDATE controls SET paused_at = NULL, paused_by = NULL
WHERE crawl = %(crawl)s AND paused_at IS NOT NULL;

-- name: pause_host
UPDATE hosts SET paused_at = crashsafe_now(%(now)s), paused_by = %(actor)s
WHERE crawl = %(crawl)s AND origin = %(origin)s AND paused_at IS NULL;

-- name: resume_host
UPDATE hosts SET paused_at = NULL, paused_by = NULL
WHERE crawl = %(crawl)s AND origin = %(origin)s AND paused_at IS NOT NULL;

-- name: count_paused_hosts
UPDATE controls
SET origins_paused = (SELECT count(*) FROM hosts
                      WHERE crawl = %(crawl)s AND paused_at IS NOT NULL)
WHERE crawl = %(crawl)s;

-- name: paused_hosts
SELECT origin, extract(epoch FROM paused_at)::float8, paused_by FROM hosts
WHERE crawl = %(crawl)s AND paused_at IS NOT NULL ORDER BY origin;

-- name: shift_origin_out
UPDATE frontier SET next_attempt_at = next_attempt_at + make_interval(secs => %(shift)s)
WHERE crawl = %(crawl)s AND state = 'pending' AND origin = %(origin)s
  AND next_attempt_at < to_timestamp(%(shifted)s);

-- name: shift_ids_out
UPDATE frontier SET next_attempt_at = next_attempt_at + make_interval(secs => %(shift)s)
WHERE id = ANY(%(ids)s::bigint[]) AND (state = 'pending') IS TRUE  -- (by id: see the top)
  AND next_attempt_at < to_timestamp(%(shifted)s);

-- name: shift_origin_back
UPDATE frontier SET next_attempt_at = next_attempt_at - make_interval(secs => %(shift)s)
WHERE crawl = %(crawl)s AND state = 'pending' AND origin = %(origin)s
  AND next_attempt_at >= to_timestamp(%(shifted)s);

-- name: ask_workers_to_stop
UPDATE workers SET stop_asked_at = crashsafe_now(%(now)s), stop_asked_by = %(actor)s
WHERE crawl = %(crawl)s AND stop_asked_at IS NULL
RETURNING owner;

-- name: stop_asked
SELECT extract(epoch FROM stop_asked_at)::float8, stop_asked_by FROM workers
WHERE owner = %(owner)s;

-- name: add_audit
INSERT INTO audit (crawl, action, target, actor, at, detail)
VALUES (%(crawl)s, %(action)s, %(target)s, %(actor)s, crashsafe_now(%(now)s), %(detail)s);

-- name: list_audit
SELECT id, crawl, action, target, actor, extract(epoch FROM at)::float8, detail FROM audit
WHERE %(crawl)s::text IS NULL OR crawl = %(crawl)s
ORDER BY id DESC LIMIT %(limit)s;

-- name: find_records
SELECT crawl, id, source, key, key_json, url, version,
       extract(epoch FROM first_seen)::float8, extract(epoch FROM last_changed)::float8,
       coalesce(data_exact, data::text), extract(epoch FROM gone_at)::float8, is_item,
       data_exact IS NOT NULL
FROM records
WHERE crawl = %(crawl)s AND strpos(key, %(text)s) > 0
ORDER BY key, id
LIMIT %(limit)s;

-- name: requeue_urls
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 'epoch', done_at = NULL
WHERE crawl = %(crawl)s AND state = 'failed' AND url = ANY(%(urls)s::text[]);

-- name: release_lapsed_out
-- Lapsed leases of paused origins that a claim met: back to pending (the lapsed grant may
-- have fetched: an attempt) and out of the due set, so they never fill a claim's scan.
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1,
    next_attempt_at = next_attempt_at + make_interval(secs => %(shift)s)
WHERE id = ANY(%(ids)s::bigint[]) AND (state = 'leased') IS TRUE
  AND lease_expires < crashsafe_now(%(now)s);

-- name: knows_origin
SELECT EXISTS (SELECT 1 FROM frontier WHERE crawl = %(crawl)s AND origin = %(origin)s);

-- name: record_versions
-- A record still at version 1 made while its crawl had no endpoint has no event: its
-- row is that version.
SELECT version, type, extract(epoch FROM at)::float8, data::text FROM (
    SELECT version, type, at, data, id FROM outbox
    WHERE crawl = %(crawl)s AND record_id = %(id)s
    UNION ALL
    SELECT 1, 'record.created', first_seen, data, 0 FROM records r
    WHERE crawl = %(crawl)s AND id = %(id)s AND version = 1
      AND NOT EXISTS (SELECT 1 FROM outbox
                      WHERE crawl = %(crawl)s AND record_id = %(id)s AND version = 1)
) AS versions ORDER BY version, id LIMIT %(limit)s;

-- name: versions_of
-- (SQLite's query says more.)
SELECT record_id, version, type, extract(epoch FROM at)::float8, url, data::text FROM outbox
WHERE crawl = %(crawl)s AND record_id = ANY(%(ids)s::text[])
ORDER BY record_id, version, id;

-- name: deliveries_by_endpoint
SELECT e.url, d.state, count(*) FROM deliveries d JOIN endpoints e ON e.id = d.endpoint
WHERE e.crawl = %(crawl)s GROUP BY e.url, d.state ORDER BY e.url, d.state;

-- name: finished_per_minute
SELECT floor(extract(epoch FROM done_at - to_timestamp(%(since)s)) / 60)::int AS minute,
       count(*)
FROM frontier
WHERE crawl = %(crawl)s AND state IN ('done', 'failed') AND done_at >= to_timestamp(%(since)s)
GROUP BY minute ORDER BY minute;

-- name: count_render
-- many (keys distinct: store/core.py sums a group's pages per pattern)
INSERT INTO render_patterns (crawl, pattern, http, browser)
SELECT crawl, pattern, http, browser
FROM unnest(%(crawl)s::text[], %(pattern)s::text[], %(http)s::bigint[], %(browser)s::bigint[])
     AS u(crawl, pattern, http, browser)
ON CONFLICT (crawl, pattern) DO UPDATE SET
    http = render_patterns.http + excluded.http,
    browser = render_patterns.browser + excluded.browser;

-- name: list_render_patterns
SELECT pattern, http, browser FROM render_patterns WHERE crawl = %(crawl)s ORDER BY pattern;

-- name: yield_again
-- many (sorted by id: store/core.py). A page a recrawl found unchanged yields again the
-- records its last parse yielded; one gone meanwhile comes back (SQLite's query says why).
UPDATE records r
SET page = u.page, seen_pass = (SELECT coalesce(max(pass), 1) FROM passes p
                                WHERE p.crawl = r.crawl),
    gone_at = NULL,
    version = r.version + (r.gone_at IS NOT NULL)::int,
    last_changed = CASE WHEN r.gone_at IS NULL THEN r.last_changed
                        ELSE crashsafe_now(u.now) END
FROM unnest(%(crawl)s::text[], %(id)s::text[], %(page)s::bigint[], %(now)s::float8[])
     AS u(crawl, id, page, now)
WHERE r.crawl = u.crawl AND r.id = u.id;

-- name: list_records
-- many (SQLite's query says more).
INSERT INTO record_pages (crawl, record, page)
SELECT * FROM unnest(%(crawl)s::text[], %(id)s::text[], %(page)s::bigint[])
ON CONFLICT DO NOTHING;

-- name: take_dropped
-- many: each page parsed again with the ids it yielded (a JSON array) (SQLite's query says
-- more). Each page's listing and each record are looked up by index, one at a time
-- (LATERAL, OFFSET 0: not flattened into a join), whatever the tables' statistics say: a
-- hash join over both whole tables, which stale statistics chose, took 150 ms a commit
-- of 16 pages at 100 000 records. The records are locked in id order, as everywhere, and
-- written by the row versions they locked.
WITH dropped AS MATERIALIZED (
    SELECT u.crawl, l.record, u.page
    FROM unnest(%(crawl)s::text[], %(page)s::bigint[], %(ids)s::text[]) AS u(crawl, page, ids)
    CROSS JOIN LATERAL (  -- (a set difference: hashed, not a scan of the ids per row)
        SELECT record FROM record_pages WHERE page = u.page
        EXCEPT
        SELECT json_array_elements_text(u.ids::json)
    ) AS l
    ORDER BY u.crawl, l.record
), taken AS MATERIALIZED (
    SELECT r.row, d.page
    FROM dropped d
    CROSS JOIN LATERAL (
        SELECT ctid AS row FROM records
        WHERE crawl = d.crawl AND id = d.record
          AND page IS DISTINCT FROM d.page AND gone_at IS NULL
        OFFSET 0
        FOR UPDATE
    ) AS r
)
UPDATE records SET page = (SELECT t.page FROM taken t WHERE t.row = records.ctid LIMIT 1)
WHERE ctid = ANY (ARRAY(SELECT row FROM taken));

-- name: unlist_dropped
-- many (as take_dropped); by the rows' ctids: a page's rows are written by its own
-- commit only, so none moves under this statement.
DELETE FROM record_pages
WHERE ctid = ANY (ARRAY(
    SELECT rp.ctid
    FROM unnest(%(crawl)s::text[], %(page)s::bigint[], %(ids)s::text[]) AS u(crawl, page, ids)
    CROSS JOIN LATERAL (
        SELECT record FROM record_pages WHERE page = u.page
        EXCEPT
        SELECT json_array_elements_text(u.ids::json)
    ) AS l
    CROSS JOIN LATERAL (
        SELECT ctid FROM record_pages
        WHERE crawl = u.crawl AND record = l.record AND page = u.page
        OFFSET 0
    ) AS rp
));

-- name: page_validators
SELECT id, validators FROM frontier
WHERE id = ANY(%(ids)s::bigint[]) AND validators IS NOT NULL;

-- name: pass_revisits
SELECT coalesce(revisit, 'fetched'), count(*), coalesce(sum(body_bytes), 0) FROM frontier
WHERE crawl = %(crawl)s AND state = 'done' AND http_status IS NOT NULL
  AND done_pass = (SELECT coalesce(max(pass), 1) FROM passes WHERE crawl = %(crawl)s)
GROUP BY 1;

-- ---------------------------------------------------------------------------------------
-- Continuous crawling (store/sql_passes.py)

-- name: revisit_changed
-- many. A sitemap's <lastmod> newer than a done page's fetch: the page is due at once.
UPDATE frontier f SET next_visit_at = crashsafe_now(u.now)
FROM unnest(%(crawl)s::text[], %(url)s::text[], %(changed_at)s::float8[], %(now)s::float8[])
     AS u(crawl, url, changed_at, now)
WHERE f.url_hash = sha256(convert_to(u.url, 'UTF8')) AND f.crawl = u.crawl
  AND f.state = 'done' AND f.done_at < to_timestamp(u.changed_at)
  AND f.next_visit_at > crashsafe_now(u.now);

-- name: lock_passes
-- One pass begins at a time, on any number of machines: the deciding transactions of a
-- crawl queue on this lock (a one-key advisory lock: not the two-key space of liveness).
SELECT pg_advisory_xact_lock(hashtextextended('crashsafe.passes/' || current_schema()
                                              || '/' || %(crawl)s, 0));

-- name: pass_open
SELECT EXISTS (SELECT 1 FROM frontier
               WHERE crawl = %(crawl)s AND state IN ('pending', 'leased'));

-- name: current_pass
SELECT coalesce(max(pass), 1),
       extract(epoch FROM coalesce(max(started_at), (SELECT min(added_at) FROM frontier
                                                     WHERE crawl = %(crawl)s),
                                   crashsafe_now(%(now)s)))::float8,
       extract(epoch FROM crashsafe_now(%(now)s))::float8
FROM passes WHERE crawl = %(crawl)s;

-- name: next_visit_at
SELECT extract(epoch FROM min(t))::float8 FROM (
    SELECT min(next_visit_at) AS t FROM frontier WHERE crawl = %(crawl)s AND state = 'done'
    UNION ALL
    SELECT min(coalesce(next_visit_at, 'epoch')) FROM frontier
    WHERE crawl = %(crawl)s AND state = 'failed') due;

-- name: put_pass_figures
INSERT INTO pass_figures
    (crawl, pass, started_at, finished_at, fetched, not_modified, unchanged, body_bytes,
     created, changed, gone)
SELECT %(crawl)s, %(pass)s, to_timestamp(%(started_at)s),
       coalesce(f.ended, crashsafe_now(%(now)s)), f.fetched, f.not_modified, f.unchanged,
       f.bytes, r.created, r.changed, r.gone
FROM (SELECT count(*) AS fetched, max(done_at) AS ended,
             count(*) FILTER (WHERE revisit = 'not-modified') AS not_modified,
             count(*) FILTER (WHERE revisit = 'unchanged') AS unchanged,
             coalesce(sum(body_bytes), 0)::bigint AS bytes
      FROM frontier
      WHERE crawl = %(crawl)s AND state = 'done' AND done_pass = %(pass)s
        AND http_status IS NOT NULL) f,
     (SELECT count(*) FILTER (WHERE gone_at IS NULL
                              AND first_seen >= to_timestamp(%(started_at)s)) AS created,
             count(*) FILTER (WHERE gone_at IS NULL
                              AND first_seen < to_timestamp(%(started_at)s)) AS changed,
             count(*) FILTER (WHERE gone_at > to_timestamp(%(started_at)s)) AS gone
      FROM records WHERE crawl = %(crawl)s
        AND last_changed >= to_timestamp(%(started_at)s)) r
ON CONFLICT (crawl, pass) DO UPDATE SET
    finished_at = excluded.finished_at, fetched = excluded.fetched,
    not_modified = excluded.not_modified, unchanged = excluded.unchanged,
    body_bytes = excluded.body_bytes, created = excluded.created,
    changed = excluded.changed, gone = excluded.gone;

-- name: list_pass_figures
SELECT pass, extract(epoch FROM started_at)::float8, extract(epoch FROM finished_at)::float8,
       fetched, not_modified, unchanged, body_bytes, created, changed, gone
FROM pass_figures WHERE crawl = %(crawl)s ORDER BY pass DESC LIMIT %(limit)s;

-- ---------------------------------------------------------------------------------------
-- A store that stays small (store/sql_retention.py; SQLite's queries say more)

-- name: outbox_ids
SELECT coalesce(min(id), 1) - 1, coalesce(max(id), 0) FROM outbox WHERE crawl = %(crawl)s;

-- name: prune_deliveries
DELETE FROM deliveries
WHERE endpoint IN (SELECT id FROM endpoints WHERE crawl = %(crawl)s)
  AND event > %(after)s AND event <= %(upto)s AND state = 'delivered'
  AND done_at < crashsafe_now(%(now)s) - make_interval(secs => %(older_than)s::float8);

-- name: prune_events
DELETE FROM outbox o
WHERE o.id > %(after)s AND o.id <= %(upto)s AND o.crawl = %(crawl)s
  AND o.at < crashsafe_now(%(now)s) - make_interval(secs => %(older_than)s::float8)
  AND NOT EXISTS (SELECT 1 FROM deliveries d
                  WHERE d.event = o.id
                    AND d.endpoint IN (SELECT id FROM endpoints WHERE crawl = %(crawl)s));

-- name: store_bytes
-- The schema's tables with their indexes and TOAST.
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r';

-- name: store_tables
SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relkind = 'r' ORDER BY 1;

-- name: pass_ended_at
SELECT extract(epoch FROM finished_at)::float8 FROM pass_figures
WHERE crawl = %(crawl)s AND pass = %(pass)s;

-- name: grant_owners
-- The owners of the crawl's grants, each one's newest, count and pages (SQLite's says why).
SELECT g.owner,
       extract(epoch FROM greatest(max(g.granted_at),
           (SELECT coalesce(w.last_seen, w.started_at) FROM workers w
            WHERE w.owner = g.owner)))::float8,
       count(*), min(g.frontier_id), max(g.frontier_id)
FROM lease_grants g WHERE g.crawl = %(crawl)s AND g.id <= %(upto)s GROUP BY g.owner;

-- name: foldable_grants
-- The crawl's grants of a range of pages that may fold into counts (SQLite's says which).
SELECT id FROM (
    SELECT id, owner,
           max(id) OVER w AS newest,
           max(id) FILTER (WHERE outcome = 'done') OVER w AS newest_done
    FROM lease_grants
    WHERE crawl = %(crawl)s AND id <= %(upto)s
      AND frontier_id > %(low)s AND frontier_id <= %(high)s
    WINDOW w AS (PARTITION BY split_part(owner, '.', 1), frontier_id)) g
WHERE (id <> newest AND id IS DISTINCT FROM newest_done)
   OR owner = ANY(%(dead)s::text[])
ORDER BY id;

-- name: fold_grants
-- Grants ids become counts, but for a current lease: the rows deleted are the rows
-- counted, so that two workers folding at once never count a grant twice.
WITH folded AS (
    DELETE FROM lease_grants g
    WHERE g.id = ANY(%(ids)s::bigint[])
      AND NOT (g.outcome IS NULL
               AND EXISTS (SELECT 1 FROM frontier f
                           WHERE f.id = g.frontier_id AND f.grant_id = g.id))
    RETURNING g.crawl, g.owner, coalesce(g.outcome, '') AS outcome),
counted AS (
    INSERT INTO grant_totals AS t (crawl, owner, outcome, n)
    SELECT crawl, owner, outcome, count(*) FROM folded GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3  -- (two folds at once take the counts' locks in one order)
    ON CONFLICT (crawl, owner, outcome) DO UPDATE SET n = t.n + excluded.n)
SELECT count(*) FROM folded;

-- name: any_retired
SELECT 1 FROM frontier WHERE crawl = %(crawl)s AND gone_streak >= 3 LIMIT 1;

-- name: revive_linked
-- Retired pages a page parsed links again, or start URLs (SQLite's says more).
UPDATE frontier SET gone_streak = 0, next_visit_at = crashsafe_now(%(now)s)
WHERE crawl = %(crawl)s AND gone_streak >= 3 AND url = ANY(%(urls)s::text[]);

-- name: revive_retired
UPDATE frontier SET gone_streak = 0, next_visit_at = crashsafe_now(%(now)s)
WHERE crawl = %(crawl)s AND gone_streak >= 3;

-- name: count_retired
SELECT count(*) FROM frontier WHERE crawl = %(crawl)s AND gone_streak >= 3;
