-- crashsafe schema, version 7 (SQLite): steering running crawls, and who steered them.

-- A crawl paused by an operator (`crashsafe pause`): no claim grants a URL of it while
-- paused_at is set. origins_paused counts its origins paused one by one (hosts.paused_at),
-- so a claim knows from this one row whether it must look at origins at all.
CREATE TABLE controls (
    crawl          TEXT    PRIMARY KEY,
    paused_at      REAL,
    paused_by      TEXT,
    origins_paused INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- An origin paused on its own: its pending URLs are moved out of the due set while it is
-- paused (their next_attempt_at shifted far ahead, and back on resume).
ALTER TABLE hosts ADD COLUMN paused_at REAL;
ALTER TABLE hosts ADD COLUMN paused_by TEXT;

-- `crashsafe cancel`: a worker that finds its row asked to stop ends its run.
ALTER TABLE workers ADD COLUMN stop_asked_at REAL;
ALTER TABLE workers ADD COLUMN stop_asked_by TEXT;

-- Every action taken on a crawl from outside (pause, resume, cancel, retry): who, when.
CREATE TABLE audit (
    id     INTEGER PRIMARY KEY,
    crawl  TEXT    NOT NULL,
    action TEXT    NOT NULL,
    target TEXT,
    actor  TEXT    NOT NULL,
    at     REAL    NOT NULL,
    detail TEXT
);
CREATE INDEX audit_crawl ON audit (crawl, id);

-- A record's versions, for the console (each version's event in the outbox holds its data).
CREATE INDEX outbox_record ON outbox (crawl, record_id, version);
