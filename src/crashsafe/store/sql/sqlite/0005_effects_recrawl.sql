-- crashsafe schema, version 5 (SQLite): recrawls, the outbox and its deliveries, files.

-- The page (frontier id) that yielded a record last, and in which pass; the pass in
-- which a page was last done. When no URL is pending or leased, a record whose page was
-- fetched (it has a status: not a page robots.txt now disallows) in a later pass than
-- the record was last yielded in is gone, with a time: its page is now 404/410, or no
-- longer lists it. Decided then, not page by page, so that a record that moved to a page
-- fetched later (a listing whose items shifted) is not taken for gone. A gone record
-- yielded again comes back as a new version.
ALTER TABLE frontier ADD COLUMN done_pass INTEGER NOT NULL DEFAULT 1;
ALTER TABLE records ADD COLUMN page INTEGER;
ALTER TABLE records ADD COLUMN seen_pass INTEGER NOT NULL DEFAULT 1;
ALTER TABLE records ADD COLUMN gone_at REAL;
-- Records stored before: their page found by URL where it can be (a redirected page's
-- record has the final URL, which may be no frontier key: that record is never gone).
UPDATE records SET page = (
    SELECT f.id FROM frontier f WHERE f.crawl = records.crawl AND f.url = records.url
);

-- Pass 1 is the first crawl; `crashsafe recrawl` starts pass 2, 3, ... by putting done
-- URLs back to pending, and notes it here.
CREATE TABLE passes (
    crawl      TEXT    NOT NULL,
    pass       INTEGER NOT NULL,
    started_at REAL    NOT NULL,
    requeued   INTEGER NOT NULL,
    PRIMARY KEY (crawl, pass)
) WITHOUT ROWID;

-- One event per (record, version), written by the triggers below in the transaction that
-- creates or changes the record (a page's commit): the outbox cannot miss a change, nor
-- hold one that did not commit. data is the record as that version had it. (No unique
-- index on (crawl, record_id, version): a version is written once, by one trigger, and
-- the index cost a fifth of a record's commit.)
CREATE TABLE outbox (
    id        INTEGER PRIMARY KEY,
    crawl     TEXT    NOT NULL,
    record_id TEXT    NOT NULL,
    version   INTEGER NOT NULL,
    type      TEXT    NOT NULL CHECK (type IN ('record.created', 'record.updated', 'record.gone')),
    url       TEXT,
    data      TEXT    NOT NULL,
    at        REAL    NOT NULL
);

-- Records stored before have an event for the version they hold: an endpoint's backlog
-- holds every record.
INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
SELECT crawl, id, version,
       CASE WHEN version = 1 THEN 'record.created' ELSE 'record.updated' END,
       url, data, last_changed
FROM records;

CREATE TRIGGER records_created AFTER INSERT ON records
BEGIN
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    VALUES (NEW.crawl, NEW.id, NEW.version, 'record.created', NEW.url, NEW.data,
            NEW.last_changed);
END;

CREATE TRIGGER records_changed AFTER UPDATE OF version ON records
WHEN NEW.version <> OLD.version
BEGIN
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    VALUES (NEW.crawl, NEW.id, NEW.version,
            CASE WHEN NEW.gone_at IS NULL THEN 'record.updated' ELSE 'record.gone' END,
            NEW.url, NEW.data, NEW.last_changed);
END;

-- A webhook that `crashsafe deliver` sends a crawl's events to; disabled when it answered
-- 410 Gone (Standard Webhooks), until `crashsafe deliver --replay` turns it on again.
CREATE TABLE endpoints (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a dispatcher knows it by id
    crawl        TEXT NOT NULL,
    url          TEXT NOT NULL,
    added_at     REAL NOT NULL,
    disabled_at  REAL,
    disabled_why TEXT,
    UNIQUE (crawl, url)
);

-- One delivery per (endpoint, event), leased like a frontier URL so several dispatchers
-- can run: attempts counts leases granted since it was last queued (a lease lost to a
-- kill counts: the request may have been sent); leases counts them all, and fences the
-- answer (only the current lease's answer is stored).
CREATE TABLE deliveries (
    endpoint        INTEGER NOT NULL,
    event           INTEGER NOT NULL,
    state           TEXT    NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'leased', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    leases          INTEGER NOT NULL DEFAULT 0,  -- never reset (a replay resets attempts)
    next_attempt_at REAL    NOT NULL DEFAULT 0,
    lease_owner     TEXT,
    lease_expires   REAL,
    last_status     INTEGER,
    last_error      TEXT,
    done_at         REAL,
    PRIMARY KEY (endpoint, event)
) WITHOUT ROWID;
CREATE INDEX deliveries_due ON deliveries (endpoint, state, next_attempt_at);

-- Every event is due to every endpoint of its crawl, from the transaction that writes it.
CREATE TRIGGER outbox_fan_out AFTER INSERT ON outbox
BEGIN
    INSERT INTO deliveries (endpoint, event)
    SELECT e.id, NEW.id FROM endpoints e WHERE e.crawl = NEW.crawl;
END;

-- Files pages downloaded, stored once per content under files/ab/cd/<sha256>; a row is
-- written in the transaction of the page whose record refers to it.
CREATE TABLE files (
    crawl        TEXT    NOT NULL,
    sha256       TEXT    NOT NULL,
    size         INTEGER NOT NULL,
    content_type TEXT,
    url          TEXT    NOT NULL,   -- the first URL it was downloaded from
    stored_at    REAL    NOT NULL,
    PRIMARY KEY (crawl, sha256)
) WITHOUT ROWID;
