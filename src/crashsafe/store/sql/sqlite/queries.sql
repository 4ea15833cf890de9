-- Named queries for the SQLite store. Only store/sqlite.py runs SQL.

-- name: enqueue_url
INSERT OR IGNORE INTO frontier (crawl, url, depth, callback, priority, added_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: expire_leases
-- A lapsed lease may have made its request: it counts an attempt (DESIGN rule 5).
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1
WHERE crawl = ? AND state = 'leased' AND lease_expires < ?;

-- name: lease_urls
UPDATE frontier
SET state = 'leased', lease_owner = :owner, lease_expires = :expires
WHERE id IN (
    SELECT id FROM frontier
    WHERE crawl = :crawl AND state = 'pending' AND next_attempt_at <= :now
    ORDER BY priority DESC, id
    LIMIT :limit
)
RETURNING id, url, depth, attempts, callback, priority;

-- name: set_grant
UPDATE frontier SET grant_id = ? WHERE id = ?;

-- name: renew_leases
-- Fenced: only grants that are still current are extended.
UPDATE frontier SET lease_expires = :expires
WHERE id IN (SELECT value FROM json_each(:ids))
  AND grant_id IN (SELECT value FROM json_each(:grants)) AND state = 'leased'
RETURNING grant_id;

-- name: current_grants
SELECT id, grant_id FROM frontier
WHERE id IN (SELECT value FROM json_each(?)) AND state = 'leased';

-- name: release_url
-- The flag says whether a request was made: then it counts an attempt.
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + ?
WHERE id = ? AND grant_id = ? AND state = 'leased';

-- name: release_grant
UPDATE lease_grants SET outcome = ? WHERE id = ? AND outcome IS NULL;

-- name: set_grant_outcome
UPDATE lease_grants SET outcome = ? WHERE id = ?;

-- name: upsert_record
INSERT INTO records (crawl, id, source, key, url, content_hash, data,
                     first_seen, last_changed, version)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
ON CONFLICT (crawl, id) DO UPDATE SET
    url = excluded.url,
    content_hash = excluded.content_hash,
    data = excluded.data,
    last_changed = excluded.last_changed,
    version = records.version + 1
WHERE records.content_hash <> excluded.content_hash;

-- name: mark_done
UPDATE frontier
SET state = 'done', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1, http_status = ?, last_error = ?, done_at = ?,
    links_skipped = ?
WHERE id = ? AND grant_id = ? AND state = 'leased';

-- name: mark_retry
-- Also for a deferred page (robots.txt unreachable): then it adds no attempt.
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + ?, http_status = ?, last_error = ?, next_attempt_at = ?
WHERE id = ? AND grant_id = ? AND state = 'leased';

-- name: hold_back_origin
-- A page deferred for its robots.txt holds back its origin's other pending URLs too (a
-- range of the (crawl, url) index: every URL of origin O sorts between "O/" and "O0").
UPDATE frontier SET next_attempt_at = max(next_attempt_at, :at)
WHERE crawl = :crawl AND state = 'pending' AND url >= :low AND url < :high;

-- name: mark_failed
UPDATE frontier
SET state = 'failed', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1, http_status = ?, last_error = ?, done_at = ?
WHERE id = ? AND grant_id = ? AND state = 'leased';

-- name: live_owners
SELECT DISTINCT lease_owner FROM frontier
WHERE crawl = ? AND state = 'leased' AND lease_owner IS NOT NULL;

-- name: release_owner
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1
WHERE crawl = ? AND state = 'leased' AND lease_owner = ?;

-- name: next_pending
SELECT min(next_attempt_at) FROM frontier WHERE crawl = ? AND state = 'pending';

-- name: next_lease_expiry
SELECT min(lease_expires) FROM frontier WHERE crawl = ? AND state = 'leased';

-- name: count_states
SELECT state, count(*) FROM frontier WHERE crawl = ? GROUP BY state;

-- name: count_links_skipped
SELECT coalesce(sum(links_skipped), 0) FROM frontier WHERE crawl = ?;

-- name: count_records
SELECT count(*) FROM records WHERE crawl = ?;

-- name: count_grants
SELECT coalesce(outcome, ''), count(*) FROM lease_grants WHERE crawl = ? GROUP BY outcome;

-- name: count_active_grants
SELECT count(*) FROM frontier WHERE crawl = ? AND state = 'leased' AND grant_id IS NOT NULL;

-- name: list_crawls
SELECT DISTINCT crawl FROM frontier ORDER BY crawl;

-- name: list_failed
SELECT crawl, url, attempts, http_status, last_error, done_at FROM frontier
WHERE state = 'failed' AND (? IS NULL OR crawl = ?)
ORDER BY crawl, done_at, id;

-- name: requeue_failed
UPDATE frontier
SET state = 'pending', attempts = 0, next_attempt_at = 0, done_at = NULL
WHERE state = 'failed' AND (? IS NULL OR crawl = ?);

-- name: iter_records
SELECT crawl, id, source, key, url, version, first_seen, last_changed, data FROM records
WHERE (? IS NULL OR crawl = ?) AND last_changed >= ?
ORDER BY crawl, first_seen, id;

-- name: get_robots
SELECT body, fetched_at, failing_since, failures, retry_at, claim_owner, claim_until
FROM robots WHERE crawl = ? AND origin = ?;

-- name: add_robots
INSERT OR IGNORE INTO robots (crawl, origin) VALUES (?, ?);

-- name: claim_robots
UPDATE robots SET claim_owner = :owner, claim_until = :until
WHERE crawl = :crawl AND origin = :origin
  AND (claim_until IS NULL OR claim_until < :now OR claim_owner = :owner);

-- name: robots_claim_owner
SELECT claim_owner FROM robots WHERE crawl = ? AND origin = ?;

-- name: take_robots_claim
UPDATE robots SET claim_owner = :owner, claim_until = :until
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :dead;

-- name: put_robots
-- Fenced like a lease: only the holder of the claim writes what it read.
UPDATE robots
SET body = :body, fetched_at = :fetched_at, failing_since = NULL, failures = 0,
    retry_at = NULL, claim_owner = NULL, claim_until = NULL
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :owner;

-- name: robots_failed
UPDATE robots
SET failing_since = coalesce(failing_since, :now), failures = failures + 1,
    retry_at = :retry_at, claim_owner = NULL, claim_until = NULL
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :owner;

-- name: release_robots
UPDATE robots SET claim_owner = NULL, claim_until = NULL
WHERE crawl = :crawl AND origin = :origin AND claim_owner = :owner;
