-- Named queries for the SQLite store. Only store/sqlite.py runs SQL.

-- name: enqueue_url
INSERT OR IGNORE INTO frontier (crawl, url, depth, callback, priority, added_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: expire_leases
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL
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
UPDATE frontier SET lease_expires = ?
WHERE crawl = ? AND lease_owner = ? AND state = 'leased';

-- name: release_url
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL
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
    attempts = attempts + 1, http_status = ?, last_error = ?, done_at = ?
WHERE id = ?;

-- name: mark_retry
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1, http_status = ?, last_error = ?, next_attempt_at = ?
WHERE id = ?;

-- name: mark_failed
UPDATE frontier
SET state = 'failed', lease_owner = NULL, lease_expires = NULL, grant_id = NULL,
    attempts = attempts + 1, http_status = ?, last_error = ?, done_at = ?
WHERE id = ?;

-- name: live_owners
SELECT DISTINCT lease_owner FROM frontier
WHERE crawl = ? AND state = 'leased' AND lease_owner IS NOT NULL;

-- name: release_owner
UPDATE frontier
SET state = 'pending', lease_owner = NULL, lease_expires = NULL, grant_id = NULL
WHERE crawl = ? AND state = 'leased' AND lease_owner = ?;

-- name: next_pending
SELECT min(next_attempt_at) FROM frontier WHERE crawl = ? AND state = 'pending';

-- name: next_lease_expiry
SELECT min(lease_expires) FROM frontier WHERE crawl = ? AND state = 'leased';

-- name: count_states
SELECT state, count(*) FROM frontier WHERE crawl = ? GROUP BY state;

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
SELECT body FROM robots WHERE crawl = ? AND origin = ? AND fetched_at >= ?;

-- name: put_robots
INSERT INTO robots (crawl, origin, body, fetched_at) VALUES (?, ?, ?, ?)
ON CONFLICT (crawl, origin) DO UPDATE SET body = excluded.body, fetched_at = excluded.fetched_at;
