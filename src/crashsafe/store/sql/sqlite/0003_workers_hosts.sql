-- crashsafe schema, version 3 (SQLite): workers, politeness across workers.

-- Every worker that registered: shown by `crashsafe status` with its liveness (its lock
-- file), the leases it holds and the pages it committed (both counted from rows).
CREATE TABLE workers (
    owner      TEXT    PRIMARY KEY,
    crawl      TEXT    NOT NULL,
    host       TEXT    NOT NULL,
    pid        INTEGER NOT NULL,
    started_at REAL    NOT NULL
) WITHOUT ROWID;

-- Per origin, what claims honour for all workers together: its robots.txt Crawl-delay,
-- and the time before which no URL of it is granted (grants spaced by the delay).
CREATE TABLE hosts (
    crawl   TEXT NOT NULL,
    origin  TEXT NOT NULL,
    delay   REAL NOT NULL DEFAULT 0,
    next_at REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (crawl, origin)
) WITHOUT ROWID;
