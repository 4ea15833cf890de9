-- crashsafe schema, version 2 (SQLite): fenced writes, links skipped, robots.txt state.

-- Malformed or unsupported links a page held, skipped instead of failing the page.
ALTER TABLE frontier ADD COLUMN links_skipped INTEGER NOT NULL DEFAULT 0;

-- lease_grants.outcome gains: stale (the commit of a lease that had been granted to
-- another worker meanwhile, refused whole) and deferred (given back unfetched until
-- robots.txt can be read).

-- robots.txt per origin, RFC 9309: the last copy read (body NULL: never read), and while
-- the file is unreachable, since when and when to try again. claim_owner/claim_until let
-- one worker at a time fetch it.
CREATE TABLE robots_v2 (
    crawl         TEXT    NOT NULL,
    origin        TEXT    NOT NULL,
    body          TEXT,
    fetched_at    REAL,
    failing_since REAL,
    failures      INTEGER NOT NULL DEFAULT 0,
    retry_at      REAL,
    claim_owner   TEXT,
    claim_until   REAL,
    PRIMARY KEY (crawl, origin)
) WITHOUT ROWID;
INSERT INTO robots_v2 (crawl, origin, body, fetched_at)
SELECT crawl, origin, body, fetched_at FROM robots;
DROP TABLE robots;
ALTER TABLE robots_v2 RENAME TO robots;
