-- crashsafe schema, version 12 (SQLite): continuous crawling (#29).

-- When a done page is due for its next visit (crawl/revisits.py: from its change
-- history, between revisit_min and revisit_max; a sitemap <lastmod> newer than its fetch
-- makes it due at once). `crawl --continuous` and `recrawl --due` queue the pages due.
-- Pages done before this version are due since their fetch.
ALTER TABLE frontier ADD COLUMN next_visit_at REAL;
UPDATE frontier SET next_visit_at = coalesce(done_at, 0) WHERE state = 'done';
CREATE INDEX frontier_revisit ON frontier (crawl, next_visit_at) WHERE state = 'done';

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
