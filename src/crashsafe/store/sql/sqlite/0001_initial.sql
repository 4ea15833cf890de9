-- crashsafe schema, version 1 (SQLite). Every row is scoped by crawl name.

CREATE TABLE frontier (
    id              INTEGER PRIMARY KEY,
    crawl           TEXT    NOT NULL,
    url             TEXT    NOT NULL,          -- canonical form
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'leased', 'done', 'failed')),
    depth           INTEGER NOT NULL DEFAULT 0,
    callback        TEXT,                      -- spider method name; NULL means parse
    priority        INTEGER NOT NULL DEFAULT 0,-- higher is leased first
    lease_owner     TEXT,
    lease_expires   REAL,
    grant_id        INTEGER,                   -- the lease_grants row of the current lease
    attempts        INTEGER NOT NULL DEFAULT 0,-- fetch outcomes recorded (not leases)
    next_attempt_at REAL    NOT NULL DEFAULT 0,
    http_status     INTEGER,
    last_error      TEXT,
    added_at        REAL    NOT NULL,
    done_at         REAL,
    UNIQUE (crawl, url)
);
-- Leasing walks this index: pending URLs by priority, then in the order they were found.
CREATE INDEX frontier_lease ON frontier (crawl, state, priority DESC, id);

-- One row per lease granted, kept for good: repeated requests are computed from it.
-- outcome: NULL while in flight (or lost to a crash), then done | retry | failed |
-- skipped (never fetched: robots.txt, off-site) | released (given back unfetched) |
-- abandoned (fetched, given back uncommitted on a graceful stop).
CREATE TABLE lease_grants (
    id          INTEGER PRIMARY KEY,
    crawl       TEXT    NOT NULL,
    frontier_id INTEGER NOT NULL,
    owner       TEXT    NOT NULL,
    granted_at  REAL    NOT NULL,
    outcome     TEXT
);
CREATE INDEX lease_grants_crawl ON lease_grants (crawl, outcome);

CREATE TABLE records (
    crawl        TEXT    NOT NULL,
    id           TEXT    NOT NULL,             -- record_id(source, key)
    source       TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    url          TEXT,
    content_hash TEXT    NOT NULL,
    data         TEXT    NOT NULL,             -- canonical JSON
    first_seen   REAL    NOT NULL,
    last_changed REAL    NOT NULL,
    version      INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (crawl, id)
) WITHOUT ROWID;
CREATE INDEX records_changed ON records (crawl, last_changed);

CREATE TABLE robots (
    crawl      TEXT NOT NULL,
    origin     TEXT NOT NULL,
    body       TEXT NOT NULL,
    fetched_at REAL NOT NULL,
    PRIMARY KEY (crawl, origin)
) WITHOUT ROWID;
