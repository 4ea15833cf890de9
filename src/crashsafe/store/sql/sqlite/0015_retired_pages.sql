-- crashsafe schema, version 15 (SQLite): pages that are gone stop being fetched.
--
-- A crawl that runs pass after pass queued every page it ever found again, and a page
-- the site took down answered 404 in every pass for good: with products coming and going
-- the passes grew while the site did not. Now a page counts the 404/410 answers it gave
-- in a row; at three (store/sql_passes.py) it is retired: no pass queues
-- it again. A link to it found again on a page parsed (core.py, revive_linked) brings it
-- back: the next pass fetches it.
ALTER TABLE frontier ADD COLUMN gone_streak INTEGER NOT NULL DEFAULT 0;
CREATE INDEX frontier_retired ON frontier (crawl, url) WHERE gone_streak >= 3;
