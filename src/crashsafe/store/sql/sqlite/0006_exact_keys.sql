-- crashsafe schema, version 6 (SQLite): a record's key read back exactly.

-- A key that a text column cannot hold as it is (NUL, which PostgreSQL's text cannot
-- hold, or a lone surrogate, which UTF-8 cannot) is kept here as its code points (a
-- JSON array); `key` then shows its readable escape. NULL for every other key.
-- Keys stored before this version were escaped without a trace: such a record gets its
-- exact key the next time its page yields it.
ALTER TABLE records ADD COLUMN key_json TEXT;
-- Data that holds surrogates, tagged so that it reads back as it was (values.tagged_json:
-- in JSON, two lone surrogates side by side would read back as one character); `data`
-- holds its plain JSON too, for the outbox and for people. NULL for all other data.
ALTER TABLE records ADD COLUMN data_exact TEXT;
-- 1: yielded as a plain item (a dict, a dataclass...), whose fields are the whole of it;
-- 0: a Record, whose key stands beside its data (an export adds it as _crashsafe_key).
ALTER TABLE records ADD COLUMN is_item INTEGER NOT NULL DEFAULT 0;

-- Why an origin's robots.txt is failing (connection refused, HTTP 503...), for the
-- progress line and `status`: what the pages of a crawl that waits wait for.
ALTER TABLE robots ADD COLUMN failing_why TEXT;

-- Links a page held beyond max_links_per_page: not followed, counted apart from the
-- malformed or unsupported ones (links_skipped).
ALTER TABLE frontier ADD COLUMN links_cut INTEGER NOT NULL DEFAULT 0;
