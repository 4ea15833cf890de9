-- crashsafe schema, version 12 (SQLite): continuous crawling (#29).

-- When a done page is due for its next visit (crawl/revisits.py: from its change
-- history, between revisit_min and revisit_max; a sitemap <lastmod> newer than its fetch
-- makes it due at once). `crawl --continuous` and `recrawl --due` queue the pages due.
-- Pages done before this version are due since their fetch.
ALTER TABLE frontier ADD COLUMN next_visit_at REAL;
UPDATE frontier SET next_visit_at = coalesce(done_at, 0) WHERE state = 'done';
CREATE INDEX frontier_revisit ON frontier (crawl, next_visit_at) WHERE state = 'done';

-- The end of a pass works from the pages done in it, not from every record of the crawl:
-- the pages of pass N, and the records each page yielded last.
CREATE INDEX frontier_pass ON frontier (crawl, done_pass) WHERE state = 'done';
CREATE INDEX records_page ON records (page);

-- What each pass did, written when it is complete (nothing pending or leased): its
-- fetches by how they went, the body bytes they downloaded, and the records it created,
-- changed and left gone. Pass 1 is the first crawl.
CREATE TABLE pass_figures (
    crawl        TEXT    NOT NULL,
    pass         INTEGER NOT NULL,
    started_at   REAL    NOT NULL,
    finished_at  REAL    NOT NULL,
    fetched      INTEGER NOT NULL,  -- pages fetched (any answer)
    not_modified INTEGER NOT NULL,  -- of them, 304s to the page's validators
    unchanged    INTEGER NOT NULL,  -- of them, the same body again (not parsed)
    body_bytes   INTEGER NOT NULL,
    created      INTEGER NOT NULL,  -- records new in the pass
    changed      INTEGER NOT NULL,  -- records with a new version
    gone         INTEGER NOT NULL,  -- records gone
    PRIMARY KEY (crawl, pass)
) WITHOUT ROWID;

-- A record's first-version event written when it first changes (0009) only while its
-- crawl has no endpoint: with one, that event was written when the record was made (or
-- when the endpoint was added), and if it is missing now it was pruned after its
-- delivery (store/sql_retention.py): writing it again would send it twice.
DROP TRIGGER records_changed;
CREATE TRIGGER records_changed AFTER UPDATE OF version ON records
WHEN NEW.version <> OLD.version
BEGIN
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    SELECT OLD.crawl, OLD.id, 1, 'record.created', OLD.url, OLD.data, OLD.last_changed
    WHERE OLD.version = 1
      AND NOT EXISTS (SELECT 1 FROM endpoints WHERE crawl = OLD.crawl)
      AND NOT EXISTS (
          SELECT 1 FROM outbox WHERE crawl = OLD.crawl AND record_id = OLD.id AND version = 1);
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    VALUES (NEW.crawl, NEW.id, NEW.version,
            CASE WHEN NEW.gone_at IS NULL THEN 'record.updated' ELSE 'record.gone' END,
            NEW.url, NEW.data, NEW.last_changed);
END;
