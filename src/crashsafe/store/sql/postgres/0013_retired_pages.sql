-- crashsafe schema, version 13 (PostgreSQL): a page that answered 404/410 three times
-- in a row is retired from passes until a link to it is found again (SQLite's 0015).
ALTER TABLE frontier ADD COLUMN gone_streak integer NOT NULL DEFAULT 0;
CREATE INDEX frontier_retired ON frontier (crawl, url) WHERE gone_streak >= 3;
