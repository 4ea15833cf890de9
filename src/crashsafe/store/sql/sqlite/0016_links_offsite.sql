-- crashsafe schema, version 16 (SQLite): the links a page held outside the allow-list.
--
-- They are not followed, as before; now a page counts them when it is done, as it counts
-- the malformed ones (links_skipped) and those beyond max_links_per_page (links_cut), so
-- that `crashsafe status` can say how many links the allow-list left out (Scrapy's
-- offsite/filtered). Pages done before this version count none.
ALTER TABLE frontier ADD COLUMN links_offsite INTEGER NOT NULL DEFAULT 0;
