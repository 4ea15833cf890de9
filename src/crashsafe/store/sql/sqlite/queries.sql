-- Named queries for the SQLite store; store/sqlite.py runs them, store/core.py names
-- them. Times are REAL seconds since the epoch, :now the store's clock. A list parameter
-- is bound as a JSON array (json_each).

-- name: enqueue_url
INSERT OR IGNORE INTO frontier (crawl, url, depth, callback, priority, request, added_at)
VALUES (:crawl, :url, :depth, :callback, :priority, :request, :now);

-- name: lease_due
-- Lapsed leases first (the grant that lapsed may have fetched: it counts an attempt),
-- then pending URLs by priority, then in the order they were found. Nothing while the
-- crawl or an origin of it is paused (then the claim asks which: store/sql_control.py).
UPDATE frontier
SET state = 'leased', lease_owner = :owner, lease_expires = :now + :lease_seconds,
    attempts = attempts + (state = 'leased')
WHERE id IN (
    SELECT id FROM (
        SELECT id FROM frontier
        WHERE crawl = :crawl AND state = 'leased' AND lease_expires < :now
        LIMIT :limit
    )
    UNION ALL
    SELECT id FROM (
        SELECT id FROM frontier
        WHERE crawl = :crawl AND state = 'pending' AND next_attempt_at <= :now
        ORDER BY priority DESC, id
        LIMIT :limit
    )
    LIMIT :limit
)
AND NOT EXISTS (SELECT 1 FROM controls
                WHERE crawl = :crawl AND (paused_at IS NOT NULL OR origins_paused > 0))
RETURNING id, url, depth, attempts, callback, priority, request, listed, validators;

-- name: lease_ids
UPDATE frontier
SET state = 'leased', lease_owner = :owner, lease_expires = :now + :lease_seconds,
    attempts = attempts + (state = 'leased')
WHERE id IN (SELECT value FROM json_each(:ids))
  AND ((state = 'pending' AND next_attempt_at <= :now)
       OR (state = 'leased' AND lease_expires < :now))
RETURNING id, url, depth, attempts, callback, priority, request, listed, validators;

-- name: add_grants
INSERT INTO lease_grants (crawl, frontier_id, owner, granted_at)
SELECT :crawl, value, :owner, :now FROM json_each(:ids)
RETURNING frontier_id, id;

-- name: set_grant
UPDATE frontier SET grant_id = :grant WHERE id = :id;

-- name: claim_candidates
-- What a polite claim chooses from (store/hosts.py): due URLs in the order they are due.
SELECT id, url FROM (
    SELECT id, url FROM frontier
    WHERE crawl = :crawl AND state = 'leased' AND lease_expires < :now
    LIMIT :scan
)
UNION ALL
SELECT id, url FROM (
    SELECT id, url FROM frontier
    WHERE crawl = :crawl AND state = 'pending' AND next_attempt_at <= :now
    ORDER BY priority DESC, id
    LIMIT :scan
)
LIMIT :scan;

-- name: held_urls
SELECT url FROM frontier WHERE crawl = :crawl AND state = 'leased' AND lease_expires >= :now;

-- name: any_host_delay
SELECT 1 FROM hosts WHERE crawl = :crawl AND delay > 0 LIMIT 1;

-- name: add_host
INSERT OR IGNORE INTO hosts (crawl, origin) VALUES (:crawl, :origin);

-- name: lock_hosts
-- (The claim's write transaction already holds the database's only write lock.)
SELECT origin, delay, max(0.0, next_at - :now) FROM hosts
WHERE crawl = :crawl AND origin IN (SELECT value FROM json_each(:origins));

-- name: space_host
UPDATE hosts SET next_at = :now + :delay WHERE crawl = :crawl AND origin = :origin;

-- name: set_host_delay
UPDATE hosts SET delay = :delay WHERE crawl = :crawl AND origin = :origin;

-- name: renew_leases
-- Fenced: only grants that are still current are extended.
UPDATE frontier SET lease_expires = :now + :lease_seconds
WHERE id IN (SELECT value FROM json_each(:ids))
  AND grant_id IN (SELECT value FROM json_each(:grants)) AND state = 'leased'
RETURNING grant_id;

-- name: current_grants
SELECT id, grant_id FROM frontier
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'leased';

-- name: release_url
-- The flag says whether a request was made: then it counts an attempt.
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + :fetched
WHERE id = :id AND grant_id = :grant AND state = 'leased';

-- name: release_grant
UPDATE lease_grants SET outcome = :outcome WHERE id = :grant AND outcome IS NULL;

-- name: set_grant_outcome
UPDATE lease_grants SET outcome = :outcome WHERE id = :grant;

-- name: mark_grant_stale
UPDATE lease_grants SET outcome = 'stale' WHERE id = :grant AND outcome IS NULL;

-- name: upsert_record
-- A changed record, or a gone one yielded again, is a new version (its outbox event is
-- written by a trigger); a record notes the page and the pass that yielded it last. An
-- unchanged record yielded again in the same pass by the same page writes nothing.
INSERT INTO records (crawl, id, source, key, key_json, is_item, url, content_hash, data,
                     data_exact, first_seen, last_changed, version, page, seen_pass)
VALUES (:crawl, :id, :source, :key, :key_json, :is_item, :url, :hash, :data, :data_exact,
        :now, :now, 1, :page, (SELECT coalesce(max(pass), 1) FROM passes WHERE crawl = :crawl))
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
                                 OR records.gone_at IS NOT NULL),
    gone_at = NULL,
    page = excluded.page,
    seen_pass = excluded.seen_pass
WHERE records.content_hash <> excluded.content_hash OR records.gone_at IS NOT NULL
   OR records.page IS NOT excluded.page OR records.seen_pass <> excluded.seen_pass
   OR records.key_json IS NOT excluded.key_json OR records.is_item <> excluded.is_item;

-- name: mark_gone
-- When no URL is pending or leased, at the end of pass :pass (2 on): the live records
-- last yielded before their page's fetch by the pages fetched since the last pass that
-- ended (a pass begun before the last one ended leaves that one's pages to this one),
-- which have a status (a temporary redirect not followed says nothing of them), that no
-- page lists any more. Each is a new version (a record.gone event). From those pages
-- (frontier_pass) to their records (records_page): not a scan of every record.
UPDATE records
SET gone_at = :now, last_changed = :now, version = version + 1
WHERE page IN (SELECT id FROM frontier
               WHERE crawl = :crawl AND state = 'done' AND done_pass <= :pass
                 AND done_pass > (SELECT coalesce(max(pass), 0) FROM pass_figures
                                  WHERE crawl = :crawl AND pass < :pass)
                 AND http_status IS NOT NULL AND http_status NOT IN (302, 303, 307))
  AND gone_at IS NULL  -- (no "crawl =": a page is one crawl's; records_page is the way)
  AND seen_pass < (SELECT done_pass FROM frontier WHERE id = records.page)
  AND NOT EXISTS (  -- no page lists it (a page not fetched in the pass may: 0013)
      SELECT 1 FROM record_pages rp WHERE rp.crawl = records.crawl AND rp.record = records.id)
  AND NOT EXISTS (
      SELECT 1 FROM frontier WHERE crawl = :crawl AND state IN ('pending', 'leased'));

-- name: mark_done
UPDATE frontier
SET state = 'done', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1, http_status = :status, last_error = :error, done_at = :now,
    -- (a page found the same, not parsed: its links as counted when it was)
    links_skipped = coalesce(:links_skipped, links_skipped),
    links_cut = coalesce(:links_cut, links_cut),
    links_offsite = coalesce(:links_offsite, links_offsite),
    done_pass = (SELECT coalesce(max(pass), 1) FROM passes WHERE crawl = frontier.crawl),
    validators = :validators, revisit = :revisit,
    body_bytes = :body_bytes, listed = coalesce(:listed, listed),
    -- 404/410 answers in a row (not a start URL's, depth 0: the crawl grows from it);
    -- a page retired at the third is due no more (0015)
    gone_streak = CASE WHEN :status IN (404, 410) AND depth > 0 THEN gone_streak + 1
                       ELSE 0 END,
    next_visit_at = CASE WHEN :status IN (404, 410) AND depth > 0 AND gone_streak >= 2
                         THEN NULL ELSE :now + coalesce(:revisit_in, 0) END
WHERE id = :id AND grant_id = :grant AND state = 'leased';

-- name: mark_retry
-- Also for a deferred page (robots.txt unreachable): then it adds no attempt.
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + :counted, http_status = :status, last_error = :error,
    next_attempt_at = :now + :retry_in
WHERE id = :id AND grant_id = :grant AND state = 'leased';

-- name: hold_back_origin
-- A page deferred for its robots.txt holds back its origin's other pending URLs too (a
-- range of the (crawl, url) index: every URL of origin O sorts between "O/" and "O0").
UPDATE frontier SET next_attempt_at = max(next_attempt_at, :now + :retry_in)
WHERE crawl = :crawl AND state = 'pending' AND url >= :low AND url < :high;

-- name: mark_failed
UPDATE frontier
SET state = 'failed', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1, http_status = :status, last_error = :error, done_at = :now,
    next_visit_at = :now + coalesce(:revisit_in, 0), gone_streak = 0
WHERE id = :id AND grant_id = :grant AND state = 'leased';

-- name: put_cookie
INSERT INTO cookies (crawl, domain, path, name, url, header, set_at)
VALUES (:crawl, :domain, :path, :name, :url, :header, :now)
ON CONFLICT (crawl, domain, path, name) DO UPDATE SET
    url = excluded.url, header = excluded.header, set_at = excluded.set_at;

-- name: list_cookies
SELECT url, header FROM cookies WHERE crawl = :crawl ORDER BY set_at, domain, path, name;

-- name: bump_cookie_jar
INSERT INTO cookie_jars (crawl, version) VALUES (:crawl, 1)
ON CONFLICT (crawl) DO UPDATE SET version = version + 1;

-- name: cookie_jar_version
SELECT version FROM cookie_jars WHERE crawl = :crawl;

-- name: add_worker
INSERT OR REPLACE INTO workers (owner, crawl, host, pid, started_at)
VALUES (:owner, :crawl, :host, :pid, :now);

-- name: idle_workers
SELECT owner FROM workers w
WHERE crawl = :crawl AND NOT EXISTS (
    SELECT 1 FROM frontier f
    WHERE f.crawl = w.crawl AND f.state = 'leased' AND f.lease_owner = w.owner
);

-- name: forget_worker
DELETE FROM workers WHERE owner = :owner;

-- name: list_workers
SELECT owner, crawl, host, pid, started_at, coalesce(last_seen, started_at) FROM workers
WHERE :crawl IS NULL OR crawl = :crawl
ORDER BY started_at, owner;

-- name: touch_worker
UPDATE workers SET last_seen = :now WHERE owner = :owner;

-- name: leases_by_owner
SELECT lease_owner, count(*) FROM frontier
WHERE (:crawl IS NULL OR crawl = :crawl) AND state = 'leased'
GROUP BY lease_owner;

-- name: pages_by_owner
-- (the grants kept, and those folded into counts: fold_grants)
SELECT owner, sum(n) FROM (
    SELECT owner, count(*) AS n FROM lease_grants
    WHERE (:crawl IS NULL OR crawl = :crawl)
      AND outcome IN ('done', 'skipped', 'retry', 'failed', 'refused')
    GROUP BY owner
    UNION ALL
    SELECT owner, n FROM grant_totals
    WHERE (:crawl IS NULL OR crawl = :crawl)
      AND outcome IN ('done', 'skipped', 'retry', 'failed', 'refused'))
GROUP BY owner;

-- name: lease_owners
SELECT DISTINCT lease_owner FROM frontier
WHERE crawl = :crawl AND state = 'leased' AND lease_owner IS NOT NULL;

-- name: release_owner
-- A dead worker's lease: an attempt (it may have fetched). Due again at once the first
-- time; once tried before, after a pause of at least :pause seconds or its retry backoff,
-- stretched by up to half at random: in a crash loop the URLs a dying worker held would
-- otherwise be the first its restart takes again, and lose their attempts together.
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1,
    next_attempt_at = CASE WHEN attempts = 0 THEN 0
        ELSE :now + max(:pause, min(:cap, :base * (1 << min(attempts - 1, 30))))
                    * (1.0 + (abs(random()) % 1000) / 2000.0) END
WHERE crawl = :crawl AND state = 'leased' AND lease_owner = :owner;

-- name: due_in
-- Seconds until a pending URL is due, until a lease lapses, until an origin held back
-- by a politeness delay may be granted again (NULL: none).
SELECT
    (SELECT min(next_attempt_at) FROM frontier WHERE crawl = :crawl AND state = 'pending')
        - :now,
    (SELECT min(lease_expires) FROM frontier WHERE crawl = :crawl AND state = 'leased')
        - :now,
    (SELECT min(next_at) FROM hosts WHERE crawl = :crawl AND next_at > :now) - :now;

-- name: list_waiting
-- The origins whose robots.txt is failing, with why, since when, the next try and the
-- pending URLs they hold back (a range of the (crawl, url) index per origin).
SELECT r.origin, r.failing_why, r.failing_since, r.retry_at,
       (SELECT count(*) FROM frontier f
        WHERE f.crawl = r.crawl AND f.state = 'pending'
          AND f.url >= r.origin || '/' AND f.url < r.origin || '0')
FROM robots r
WHERE r.crawl = :crawl AND r.failing_since IS NOT NULL
ORDER BY r.origin;

-- name: fetchable
-- Whether a URL is leased, or pending at an origin whose robots.txt is not failing: if
-- not, all that is left waits on unreachable origins. (Stops at the first such URL; only
-- asked while a worker has nothing to do.)
SELECT EXISTS (SELECT 1 FROM frontier WHERE crawl = :crawl AND state = 'leased')
    OR EXISTS (
        SELECT 1 FROM frontier f
        WHERE f.crawl = :crawl AND f.state = 'pending'
          AND NOT EXISTS (
              SELECT 1 FROM robots r
              WHERE r.crawl = f.crawl AND r.failing_since IS NOT NULL
                AND f.url >= r.origin || '/' AND f.url < r.origin || '0'));

-- name: count_states
SELECT state, count(*) FROM frontier WHERE crawl = :crawl GROUP BY state;

-- name: count_links_skipped
SELECT coalesce(sum(links_skipped), 0), coalesce(sum(links_cut), 0),
       coalesce(sum(links_offsite), 0)
FROM frontier WHERE crawl = :crawl;

-- name: count_records
SELECT count(*) FROM records WHERE crawl = :crawl AND gone_at IS NULL;

-- name: count_grants
-- (the grants kept, and those folded into counts: fold_grants)
SELECT outcome, sum(n) FROM (
    SELECT coalesce(outcome, '') AS outcome, count(*) AS n FROM lease_grants
    WHERE crawl = :crawl GROUP BY outcome
    UNION ALL
    SELECT outcome, n FROM grant_totals WHERE crawl = :crawl)
GROUP BY outcome;

-- name: count_active_grants
SELECT count(*) FROM frontier
WHERE crawl = :crawl AND state = 'leased' AND grant_id IS NOT NULL;

-- name: list_crawls
SELECT DISTINCT crawl FROM frontier ORDER BY crawl;

-- name: list_failed
SELECT crawl, url, attempts, http_status, last_error, done_at FROM frontier
WHERE state = 'failed' AND (:crawl IS NULL OR crawl = :crawl)
ORDER BY crawl, done_at, id;

-- name: requeue_failed
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 0, done_at = NULL
WHERE state = 'failed' AND (:crawl IS NULL OR crawl = :crawl);

-- name: iter_records
-- One page of a crawl's live records, in id order after :after (keyset: every page is a
-- short read, so a slow reader never pins the WAL); with a time (a change feed): those
-- changed since, gone ones too, and with changed_only not those first seen since.
SELECT crawl, id, source, key, key_json, url, version, first_seen, last_changed,
       coalesce(data_exact, data), gone_at, is_item, data_exact IS NOT NULL
FROM records
WHERE crawl = :crawl AND id > :after AND last_changed >= :since
  AND (gone_at IS NULL OR :feed)
  AND (:changed_only = 0 OR first_seen < :since)
ORDER BY id
LIMIT :limit;

-- name: get_robots
SELECT body, :now - fetched_at, :now - failing_since, failures, retry_at - :now,
       CASE WHEN claim_owner IS NOT NULL THEN claim_until - :now END
FROM robots WHERE crawl = :crawl AND origin = :origin;

-- name: add_robots
INSERT OR IGNORE INTO robots (crawl, origin) VALUES (:crawl, :origin);

-- name: claim_robots
UPDATE robots SET claim_owner = :owner, claim_until = :now + :seconds
WHERE crawl = :crawl AND origin = :origin
  AND (claim_until IS NULL OR claim_until < :now OR claim_owner = :owner);

-- name: robots_claim_owner
SELECT claim_owner FROM robots WHERE crawl = :crawl AND origin = :origin;

-- name: take_robots_claim
UPDATE robots SET claim_owner = :owner, claim_until = :now + :seconds
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :dead;

-- name: put_robots
-- Fenced like a lease: only the holder of the claim writes what it read.
UPDATE robots
SET body = :body, fetched_at = :now - :age, failing_since = NULL, failures = 0,
    failing_why = NULL, retry_at = NULL, claim_owner = NULL, claim_until = NULL
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :owner;

-- name: robots_failed
UPDATE robots
SET failing_since = coalesce(failing_since, :now), failures = failures + 1,
    failing_why = :why, retry_at = :now + :retry_in, claim_owner = NULL, claim_until = NULL
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :owner;

-- name: release_robots
UPDATE robots SET claim_owner = NULL, claim_until = NULL
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :owner;

-- ---------------------------------------------------------------------------------------
-- Recrawls and side effects (store/sql_effects.py)

-- name: requeue_done
-- (not a retired page: gone at its last three visits, 0015)
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 0, last_error = NULL
WHERE crawl = :crawl AND state = 'done' AND done_at <= :now - :older_than
  AND gone_streak < 3;

-- name: requeue_due
-- The done pages due for their next visit, or within :early seconds (a pass takes
-- them together rather than one at a time), a range of the frontier_revisit index.
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 0, last_error = NULL
WHERE crawl = :crawl AND state = 'done' AND next_visit_at <= :now + :early
  AND gone_streak < 3;

-- name: requeue_failed_pages
-- A pass of a crawl that keeps running gives its failed pages another chance too: all
-- of them (--every), or those due (--continuous: after the middle interval).
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 0, last_error = NULL
WHERE crawl = :crawl AND state = 'failed'
  AND (:all OR coalesce(next_visit_at, 0) <= :now + :early);

-- name: add_pass
INSERT INTO passes (crawl, pass, started_at, requeued)
VALUES (:crawl, (SELECT coalesce(max(pass), 1) + 1 FROM passes WHERE crawl = :crawl), :now,
        :requeued)
RETURNING pass;

-- name: last_pass_at
SELECT max(started_at) FROM passes WHERE crawl = :crawl;

-- name: effect_counts
SELECT
    (SELECT coalesce(max(pass), 1) FROM passes WHERE crawl = :crawl),
    (SELECT max(started_at) FROM passes WHERE crawl = :crawl),
    coalesce(sum(version), 0),
    count(*) FILTER (WHERE version > 1),
    count(*) FILTER (WHERE gone_at IS NOT NULL),
    count(*) FILTER (WHERE last_changed >= (SELECT max(started_at) FROM passes
                                             WHERE crawl = :crawl)
                       AND first_seen < (SELECT max(started_at) FROM passes
                                         WHERE crawl = :crawl)),
    (SELECT count(*) FROM files WHERE crawl = :crawl),
    (SELECT coalesce(sum(size), 0) FROM files WHERE crawl = :crawl),
    -- events: once the crawl has an endpoint every one is written (counted, so a missing
    -- or doubled one shows); before, one per version (not all written yet: 0009)
    CASE WHEN EXISTS (SELECT 1 FROM endpoints WHERE crawl = :crawl)
         THEN (SELECT count(*) FROM outbox WHERE crawl = :crawl)
         ELSE coalesce(sum(version), 0) END
FROM records WHERE crawl = :crawl;

-- name: count_deliveries
SELECT d.state, count(*) FROM deliveries d JOIN endpoints e ON e.id = d.endpoint
WHERE e.crawl = :crawl GROUP BY d.state;

-- name: high_water
-- The last lease grant so far (ids only grow), and the time.
SELECT (SELECT coalesce(max(id), 0) FROM lease_grants), :now;

-- name: requests_after
-- A run's grants after its high-water mark (owner ids start with the run's id; :n 0:
-- every worker's) that made a request (stats.py's rule: not given back unfetched, and
-- not still in flight). A run's folded grants (fold_grants) count by its owners: they
-- all came after its mark. (Without a run, only the grants kept are seen.)
SELECT (SELECT count(*) FROM lease_grants g
        WHERE g.id > :grants AND g.crawl = :crawl AND substr(g.owner, 1, :n) = :prefix
          AND coalesce(g.outcome, '') NOT IN ('released', 'skipped', 'deferred', 'refused')
          AND NOT (g.outcome IS NULL
                   AND EXISTS (SELECT 1 FROM frontier f
                               WHERE f.id = g.frontier_id AND f.grant_id = g.id)))
     + (SELECT coalesce(sum(n), 0) FROM grant_totals t
        WHERE :n > 0 AND t.crawl = :crawl AND substr(t.owner, 1, :n) = :prefix
          AND t.outcome NOT IN ('released', 'skipped', 'deferred', 'refused'));

-- name: records_after
-- The records that changed since :at (created, updated, gone) whose page was done by one
-- of the run's grants after its mark: what this run's own commits did.
SELECT coalesce(sum(r.gone_at IS NULL AND r.version = 1), 0),
       coalesce(sum(r.gone_at IS NULL AND r.version > 1), 0),
       coalesce(sum(r.gone_at IS NOT NULL), 0)
FROM records r
WHERE r.crawl = :crawl AND r.last_changed >= :at
  AND r.page IN (SELECT frontier_id FROM lease_grants
                 WHERE id > :grants AND crawl = :crawl AND outcome = 'done'
                   AND substr(owner, 1, :n) = :prefix);

-- name: put_file
INSERT INTO files (crawl, sha256, size, content_type, url, stored_at)
VALUES (:crawl, :sha256, :size, :content_type, :url, :now)
ON CONFLICT DO NOTHING;

-- name: find_endpoint
SELECT id, disabled_at, disabled_why FROM endpoints WHERE crawl = :crawl AND url = :url;

-- name: lock_outbox
-- (SQLite: the write transaction already keeps every page commit out.)
SELECT 1;

-- name: add_endpoint
INSERT INTO endpoints (crawl, url, added_at) VALUES (:crawl, :url, :now) RETURNING id;

-- name: write_missing_events
-- Before a crawl's first endpoint: the events of records made while it had none (each
-- still at version 1: every later version wrote its own), in the order they were made.
INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
SELECT r.crawl, r.id, 1, 'record.created', r.url, r.data, r.first_seen FROM records r
WHERE r.crawl = :crawl AND r.version = 1
  AND NOT EXISTS (SELECT 1 FROM outbox o
                  WHERE o.crawl = r.crawl AND o.record_id = r.id AND o.version = 1)
ORDER BY r.first_seen, r.id;

-- name: add_backlog
INSERT INTO deliveries (endpoint, event)
SELECT :endpoint, id FROM outbox WHERE crawl = :crawl
ON CONFLICT DO NOTHING;

-- name: lease_deliveries
-- Lapsed leases (their request may have been sent: the attempt counts) and due ones, in
-- the order the events were written.
UPDATE deliveries
SET state = 'leased', lease_owner = :owner, lease_expires = :now + :lease_seconds,
    attempts = attempts + 1, leases = leases + 1
WHERE endpoint = :endpoint AND event IN (
    SELECT event FROM deliveries
    WHERE endpoint = :endpoint
      AND ((state = 'pending' AND next_attempt_at <= :now)
           OR (state = 'leased' AND lease_expires < :now))
    ORDER BY event
    LIMIT :limit
) AND (SELECT disabled_at FROM endpoints WHERE id = :endpoint) IS NULL
RETURNING event, attempts, leases;

-- name: get_events
SELECT id, crawl, record_id, version, type, url, data, at FROM outbox
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: delivered
-- Whoever holds it now: the receiver has it (a later answer of another lease is refused).
UPDATE deliveries
SET state = 'delivered', done_at = :now, last_status = :status, last_error = NULL,
    lease_owner = NULL, lease_expires = NULL
WHERE endpoint = :endpoint AND event = :event AND state <> 'delivered';

-- name: delivery_retry
UPDATE deliveries
SET state = 'pending', next_attempt_at = :now + :retry_in, last_status = :status,
    last_error = :error, lease_owner = NULL, lease_expires = NULL
WHERE endpoint = :endpoint AND event = :event AND state = 'leased'
  AND lease_owner = :owner AND leases = :lease;

-- name: delivery_failed
UPDATE deliveries
SET state = 'failed', done_at = :now, last_status = :status, last_error = :error,
    lease_owner = NULL, lease_expires = NULL
WHERE endpoint = :endpoint AND event = :event AND state = 'leased'
  AND lease_owner = :owner AND leases = :lease;

-- name: disable_endpoint
UPDATE endpoints SET disabled_at = :now, disabled_why = :why
WHERE id = :endpoint AND disabled_at IS NULL;

-- name: deliveries_due_in
SELECT
    (SELECT min(next_attempt_at) FROM deliveries
     WHERE endpoint = :endpoint AND state = 'pending') - :now,
    (SELECT min(lease_expires) FROM deliveries
     WHERE endpoint = :endpoint AND state = 'leased') - :now;

-- name: list_failed_deliveries
SELECT e.url, o.crawl, o.record_id, o.version, o.type, d.attempts, d.last_status,
       d.last_error, d.done_at
FROM deliveries d JOIN endpoints e ON e.id = d.endpoint JOIN outbox o ON o.id = d.event
WHERE d.state = 'failed' AND e.crawl = :crawl AND (:url IS NULL OR e.url = :url)
ORDER BY e.url, d.event;

-- name: replay_failed
UPDATE deliveries
SET state = 'pending', attempts = 0, next_attempt_at = 0, done_at = NULL
WHERE state = 'failed' AND endpoint IN (
    SELECT id FROM endpoints WHERE crawl = :crawl AND (:url IS NULL OR url = :url));

-- name: enable_endpoints
UPDATE endpoints SET disabled_at = NULL, disabled_why = NULL
WHERE crawl = :crawl AND (:url IS NULL OR url = :url) AND disabled_at IS NOT NULL;

-- name: count_endpoint_deliveries
SELECT state, count(*) FROM deliveries WHERE endpoint = :endpoint GROUP BY state;

-- name: remove_deliveries
DELETE FROM deliveries
WHERE endpoint IN (SELECT id FROM endpoints WHERE crawl = :crawl AND url = :url);

-- name: remove_endpoint
DELETE FROM endpoints WHERE crawl = :crawl AND url = :url;

-- Steering (store/sql_control.py) ---------------------------------------------------------

-- name: claim_gate
-- Read by every claim: whether the crawl is paused, and whether any origin of it is.
SELECT paused_at IS NOT NULL, origins_paused FROM controls WHERE crawl = :crawl;

-- name: control_of
SELECT paused_at, paused_by, origins_paused FROM controls WHERE crawl = :crawl;

-- name: add_control
INSERT OR IGNORE INTO controls (crawl) VALUES (:crawl);

-- name: pause_crawl
UPDATE controls SET paused_at = :now, paused_by = :actor
WHERE crawl = :crawl AND paused_at IS NULL;

-- name: resume_crawl
UPDATE controls SET paused_at = NULL, paused_by = NULL
WHERE crawl = :crawl AND paused_at IS NOT NULL;

-- name: pause_host
UPDATE hosts SET paused_at = :now, paused_by = :actor
WHERE crawl = :crawl AND origin = :origin AND paused_at IS NULL;

-- name: resume_host
UPDATE hosts SET paused_at = NULL, paused_by = NULL
WHERE crawl = :crawl AND origin = :origin AND paused_at IS NOT NULL;

-- name: count_paused_hosts
UPDATE controls
SET origins_paused = (SELECT count(*) FROM hosts
                      WHERE crawl = :crawl AND paused_at IS NOT NULL)
WHERE crawl = :crawl;

-- name: paused_hosts
SELECT origin, paused_at, paused_by FROM hosts
WHERE crawl = :crawl AND paused_at IS NOT NULL ORDER BY origin;

-- name: shift_origin_out
-- A paused origin's pending URLs leave the due set: shifted :shift seconds ahead (their
-- own backoffs kept, to be shifted back on resume). A range of the (crawl, url) index.
UPDATE frontier SET next_attempt_at = next_attempt_at + :shift
WHERE crawl = :crawl AND state = 'pending' AND url >= :low AND url < :high
  AND next_attempt_at < :shifted;

-- name: shift_ids_out
UPDATE frontier SET next_attempt_at = next_attempt_at + :shift
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending'
  AND next_attempt_at < :shifted;

-- name: shift_origin_back
UPDATE frontier SET next_attempt_at = next_attempt_at - :shift
WHERE crawl = :crawl AND state = 'pending' AND url >= :low AND url < :high
  AND next_attempt_at >= :shifted;

-- name: ask_workers_to_stop
UPDATE workers SET stop_asked_at = :now, stop_asked_by = :actor
WHERE crawl = :crawl AND stop_asked_at IS NULL
RETURNING owner;

-- name: stop_asked
SELECT stop_asked_at, stop_asked_by FROM workers WHERE owner = :owner;

-- name: add_audit
INSERT INTO audit (crawl, action, target, actor, at, detail)
VALUES (:crawl, :action, :target, :actor, :now, :detail);

-- name: list_audit
SELECT id, crawl, action, target, actor, at, detail FROM audit
WHERE :crawl IS NULL OR crawl = :crawl
ORDER BY id DESC LIMIT :limit;

-- name: lock_control
-- (The write transaction already holds the database's only write lock.)
SELECT 1 FROM controls WHERE crawl = :crawl;

-- name: find_records
-- Records whose key holds :text (the console's search), gone ones too, by key.
SELECT crawl, id, source, key, key_json, url, version, first_seen, last_changed,
       coalesce(data_exact, data), gone_at, is_item, data_exact IS NOT NULL
FROM records
WHERE crawl = :crawl AND instr(key, :text) > 0
ORDER BY key, id
LIMIT :limit;

-- name: requeue_urls
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 0, done_at = NULL
WHERE crawl = :crawl AND state = 'failed' AND url IN (SELECT value FROM json_each(:urls));

-- name: release_lapsed_out
-- Lapsed leases of paused origins that a claim met: back to pending (the lapsed grant may
-- have fetched: an attempt) and out of the due set, so they never fill a claim's scan.
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1, next_attempt_at = next_attempt_at + :shift
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'leased' AND lease_expires < :now;

-- name: knows_origin
SELECT EXISTS (SELECT 1 FROM frontier
               WHERE crawl = :crawl AND url >= :low AND url < :high);

-- name: record_versions
-- A record still at version 1 made while its crawl had no endpoint has no event: its
-- row is that version.
SELECT version, type, at, data FROM (
    SELECT version, type, at, data, id FROM outbox WHERE crawl = :crawl AND record_id = :id
    UNION ALL
    SELECT 1, 'record.created', first_seen, data, 0 FROM records r
    WHERE crawl = :crawl AND id = :id AND version = 1
      AND NOT EXISTS (SELECT 1 FROM outbox
                      WHERE crawl = :crawl AND record_id = :id AND version = 1)
) ORDER BY version, id LIMIT :limit;

-- name: versions_of
-- The versions the outbox holds of records :ids (a JSON array), oldest first: a record's
-- history, as far back as the outbox's retention (store/sql_retention.py).
SELECT record_id, version, type, at, url, data FROM outbox
WHERE crawl = :crawl AND record_id IN (SELECT value FROM json_each(:ids))
ORDER BY record_id, version, id;

-- name: deliveries_by_endpoint
SELECT e.url, d.state, count(*) FROM deliveries d JOIN endpoints e ON e.id = d.endpoint
WHERE e.crawl = :crawl GROUP BY e.url, d.state ORDER BY e.url, d.state;

-- name: finished_per_minute
-- Pages finished (done or failed) per minute since :since, oldest first: the console's
-- rate chart of the last hour, read once when it starts (then it samples the counts).
SELECT CAST((done_at - :since) / 60 AS INTEGER) AS minute, count(*) FROM frontier
WHERE crawl = :crawl AND state IN ('done', 'failed') AND done_at >= :since
GROUP BY minute ORDER BY minute;

-- name: count_render
INSERT INTO render_patterns (crawl, pattern, http, browser)
VALUES (:crawl, :pattern, :http, :browser)
ON CONFLICT (crawl, pattern) DO UPDATE SET
    http = render_patterns.http + excluded.http,
    browser = render_patterns.browser + excluded.browser;

-- name: list_render_patterns
SELECT pattern, http, browser FROM render_patterns WHERE crawl = :crawl ORDER BY pattern;

-- name: yield_again
-- A page a recrawl found unchanged (a 304, the same body) yields again the records its
-- last parse yielded: noted as in upsert_record, their data as it is. One marked gone
-- meanwhile (a pass that fetched only another page of it, which dropped it) is on this
-- page still: it comes back, a new version, as a gone record yielded again does.
UPDATE records
SET page = :page,
    seen_pass = (SELECT coalesce(max(pass), 1) FROM passes WHERE crawl = :crawl),
    gone_at = NULL,
    version = version + (gone_at IS NOT NULL),
    last_changed = CASE WHEN gone_at IS NULL THEN last_changed ELSE :now END
WHERE crawl = :crawl AND id = :id;

-- name: list_records
-- many: a record a page's parse yielded is on that page's listing (schema 0013).
INSERT OR IGNORE INTO record_pages (crawl, record, page) VALUES (:crawl, :id, :page);

-- name: take_dropped
-- A page parsed again (or now 404/410, or a permanent redirect): the records its last
-- parse listed that it no longer yields become its own (records.page), so that the end
-- of the pass weighs them (mark_gone: gone if no page lists them any more). Before
-- unlist_dropped, which takes them off its listing.
UPDATE records SET page = :page
WHERE crawl = :crawl AND page IS NOT :page AND gone_at IS NULL
  AND id IN (SELECT record FROM record_pages
             WHERE page = :page AND record NOT IN (SELECT value FROM json_each(:ids)));

-- name: unlist_dropped
DELETE FROM record_pages
WHERE page = :page AND record NOT IN (SELECT value FROM json_each(:ids));

-- name: page_validators
SELECT id, validators FROM frontier
WHERE id IN (SELECT value FROM json_each(:ids)) AND validators IS NOT NULL;

-- name: pass_revisits
-- The last pass's fetches: by how they went, and the bytes they downloaded.
SELECT coalesce(revisit, 'fetched'), count(*), coalesce(sum(body_bytes), 0) FROM frontier
WHERE crawl = :crawl AND state = 'done' AND http_status IS NOT NULL
  AND done_pass = (SELECT coalesce(max(pass), 1) FROM passes WHERE crawl = :crawl)
GROUP BY 1;

-- ---------------------------------------------------------------------------------------
-- Continuous crawling (store/sql_passes.py)

-- name: revisit_changed
-- A sitemap's <lastmod> newer than a done page's fetch: the page is due at once.
UPDATE frontier SET next_visit_at = :now
WHERE crawl = :crawl AND url = :url AND state = 'done' AND done_at < :changed_at
  AND next_visit_at > :now;

-- name: lock_passes
-- (SQLite: the write transaction's lock is the database's; nothing to take here)
SELECT 1;

-- name: pass_open
-- Whether the crawl's current pass has pages pending or leased.
SELECT EXISTS (SELECT 1 FROM frontier WHERE crawl = :crawl AND state IN ('pending', 'leased'));

-- name: current_pass
-- The crawl's current pass and when it began (pass 1: when its first URL was added).
SELECT coalesce(max(pass), 1),
       coalesce(max(started_at), (SELECT min(added_at) FROM frontier WHERE crawl = :crawl),
                :now),
       :now
FROM passes WHERE crawl = :crawl;

-- name: next_visit_at
-- The earliest next visit of a done or failed page (NULL: none is).
SELECT min(t) FROM (
    SELECT min(next_visit_at) AS t FROM frontier WHERE crawl = :crawl AND state = 'done'
    UNION ALL
    SELECT min(coalesce(next_visit_at, 0)) FROM frontier
    WHERE crawl = :crawl AND state = 'failed');

-- name: put_pass_figures
-- The pass's fetches (its done pages with a status), and the records changed since it
-- began (a range of the records_changed index).
INSERT OR REPLACE INTO pass_figures
    (crawl, pass, started_at, finished_at, fetched, not_modified, unchanged, body_bytes,
     created, changed, gone)
SELECT :crawl, :pass, :started_at, coalesce(f.ended, :now), f.fetched, f.not_modified,
       f.unchanged, f.bytes, r.created, r.changed, r.gone
FROM (SELECT count(*) AS fetched, max(done_at) AS ended,
             coalesce(sum(revisit = 'not-modified'), 0) AS not_modified,
             coalesce(sum(revisit = 'unchanged'), 0) AS unchanged,
             coalesce(sum(body_bytes), 0) AS bytes
      FROM frontier
      WHERE crawl = :crawl AND state = 'done' AND done_pass = :pass
        AND http_status IS NOT NULL) f,
     (SELECT coalesce(sum(gone_at IS NULL AND first_seen >= :started_at), 0) AS created,
             coalesce(sum(gone_at IS NULL AND first_seen < :started_at), 0) AS changed,
             coalesce(sum(gone_at > :started_at), 0) AS gone  -- (not the last pass's)
      FROM records WHERE crawl = :crawl AND last_changed >= :started_at) r;

-- name: list_pass_figures
SELECT pass, started_at, finished_at, fetched, not_modified, unchanged, body_bytes, created,
       changed, gone
FROM pass_figures WHERE crawl = :crawl ORDER BY pass DESC LIMIT :limit;

-- ---------------------------------------------------------------------------------------
-- A store that stays small (store/sql_retention.py)

-- name: outbox_ids
SELECT coalesce(min(id), 1) - 1, coalesce(max(id), 0) FROM outbox WHERE crawl = :crawl;

-- name: prune_deliveries
-- The deliveries of the crawl's endpoints delivered before the retention, of the events
-- in (:after, :upto] (a range of the primary key per endpoint).
DELETE FROM deliveries
WHERE endpoint IN (SELECT id FROM endpoints WHERE crawl = :crawl)
  AND event > :after AND event <= :upto
  AND state = 'delivered' AND done_at < :now - :older_than;

-- name: prune_events
-- The crawl's events in (:after, :upto] older than the retention that no endpoint still
-- has a delivery of (pending, leased or failed ones keep theirs).
DELETE FROM outbox
WHERE id > :after AND id <= :upto AND crawl = :crawl AND at < :now - :older_than
  AND NOT EXISTS (SELECT 1 FROM deliveries d
                  WHERE d.event = outbox.id
                    AND d.endpoint IN (SELECT id FROM endpoints WHERE crawl = :crawl));

-- name: pass_ended_at
SELECT finished_at FROM pass_figures WHERE crawl = :crawl AND pass = :pass;

-- name: grant_owners
-- The owners of the crawl's grants up to :upto, when each was last at work (its newest
-- grant, or its last_seen while its row is kept), its grants, and the pages they span:
-- fold_grants asks which runs are over, and since when.
SELECT g.owner,
       max(max(g.granted_at),
           coalesce((SELECT coalesce(w.last_seen, w.started_at) FROM workers w
                     WHERE w.owner = g.owner), 0)),
       count(*), min(g.frontier_id), max(g.frontier_id)
FROM lease_grants g WHERE g.crawl = :crawl AND g.id <= :upto GROUP BY g.owner;

-- name: foldable_grants
-- The crawl's grants up to :upto of the pages :low < frontier_id <= :high that may fold
-- into counts: each that a newer grant of the same run and page stands for (the newest
-- stays, and the newest done: a run's records_after looks at it), and the rest of the
-- owners :dead (their run ended more than FOLD_GRACE ago). A current lease is kept when
-- folding (fold_grants). (A run: the owner id before its first dot.)
SELECT id FROM (
    SELECT id, owner,
           max(id) OVER w AS newest,
           max(CASE WHEN outcome = 'done' THEN id END) OVER w AS newest_done
    FROM lease_grants
    WHERE crawl = :crawl AND id <= :upto AND frontier_id > :low AND frontier_id <= :high
    WINDOW w AS (PARTITION BY
        CASE WHEN instr(owner, '.') > 0 THEN substr(owner, 1, instr(owner, '.') - 1)
             ELSE owner END,
        frontier_id))
WHERE (id <> newest AND id IS NOT newest_done)
   OR owner IN (SELECT value FROM json_each(:dead))
ORDER BY id;

-- name: fold_grants
-- Grants :ids become counts, but for a current lease and for the table's last row
-- (SQLite gives a new row the last id + 1: ids would come back). drop_folded follows.
INSERT INTO grant_totals (crawl, owner, outcome, n)
SELECT crawl, owner, coalesce(outcome, ''), count(*) FROM lease_grants g
WHERE g.id IN (SELECT value FROM json_each(:ids))
  AND g.id < (SELECT max(id) FROM lease_grants)
  AND NOT (g.outcome IS NULL
           AND EXISTS (SELECT 1 FROM frontier f WHERE f.id = g.frontier_id AND f.grant_id = g.id))
GROUP BY crawl, owner, coalesce(outcome, '')
ON CONFLICT (crawl, owner, outcome) DO UPDATE SET n = n + excluded.n;

-- name: drop_folded
DELETE FROM lease_grants
WHERE id IN (SELECT value FROM json_each(:ids))
  AND id < (SELECT max(id) FROM lease_grants)
  AND NOT (outcome IS NULL
           AND EXISTS (SELECT 1 FROM frontier f
                       WHERE f.id = lease_grants.frontier_id AND f.grant_id = lease_grants.id));

-- name: any_retired
-- Whether the crawl has a retired page (gone at its last three visits: 0015).
SELECT 1 FROM frontier WHERE crawl = :crawl AND gone_streak >= 3 LIMIT 1;

-- name: revive_linked
-- Retired pages a page parsed links again, or a run was given as start URLs: the next
-- pass fetches them (and a crawl that keeps running, at once).
UPDATE frontier SET gone_streak = 0, next_visit_at = :now
WHERE crawl = :crawl AND gone_streak >= 3 AND url IN (SELECT value FROM json_each(:urls));

-- name: revive_retired
UPDATE frontier SET gone_streak = 0, next_visit_at = :now
WHERE crawl = :crawl AND gone_streak >= 3;

-- name: count_retired
SELECT count(*) FROM frontier WHERE crawl = :crawl AND gone_streak >= 3;
