-- crashsafe schema, version 13 (SQLite): a record on several pages is gone only when no
-- page lists it any more.
--
-- A record notes one page, the one that yielded it last (records.page, 0005), and a pass
-- ended by marking gone the records whose page was fetched in it and no longer yielded
-- them. A record two pages list was so marked gone by a pass that fetched only the one of
-- them that dropped it (a continuous crawl's pass fetches the pages due, not all). Now
-- each page's listing is kept: the records its last parse yielded. Only a page's own
-- commit writes its rows (so two workers never race on one), and the end of a pass,
-- when no page of it is pending or leased, marks gone only a record no page lists
-- (store/core.py; queries list_records, take_dropped, unlist_dropped, mark_gone). A page
-- that answered 304, the same body, a temporary redirect, or that robots.txt now
-- disallows keeps its listing.
CREATE TABLE record_pages (
    crawl  TEXT    NOT NULL,
    record TEXT    NOT NULL,
    page   INTEGER NOT NULL,  -- a frontier id whose last parse yielded the record
    PRIMARY KEY (crawl, record, page)
) WITHOUT ROWID;
CREATE INDEX record_pages_page ON record_pages (page);

-- Whether a page's listing holds records: its claim says so (Lease.listed), and only
-- then does its commit look for records it dropped. A column the claim returns, not a
-- lookup in record_pages per URL claimed.
ALTER TABLE frontier ADD COLUMN listed INTEGER NOT NULL DEFAULT 0;

-- The listings as the database knows them: each live record on the page that yielded it
-- last (unless that page's last fetch dropped it), and on every page whose last parse
-- yielded it by the ids each page keeps with its validators (since version 11; not a page
-- of more than 1 000 records, nor one whose last fetch was a temporary redirect).
INSERT OR IGNORE INTO record_pages (crawl, record, page)
SELECT r.crawl, r.id, r.page FROM records r
WHERE r.gone_at IS NULL AND r.page IS NOT NULL
  AND r.seen_pass >= coalesce((SELECT done_pass FROM frontier WHERE id = r.page), 0);
INSERT OR IGNORE INTO record_pages (crawl, record, page)
SELECT f.crawl, j.value, f.id FROM frontier f, json_each(f.validators, '$.records') j
WHERE f.state = 'done' AND f.validators IS NOT NULL AND json_valid(f.validators)
  AND EXISTS (SELECT 1 FROM records r
              WHERE r.crawl = f.crawl AND r.id = j.value AND r.gone_at IS NULL);
UPDATE frontier SET listed = 1 WHERE id IN (SELECT page FROM record_pages);
