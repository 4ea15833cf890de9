-- crashsafe schema, version 13 (SQLite): a record on several pages is gone only when no
-- page lists it any more.
--
-- A record notes one page, the one that yielded it last (records.page, 0005); a pass ends
-- by marking gone the records whose page was fetched since and no longer yielded them.
-- A record two pages list was marked gone when a pass fetched only the one of them that
-- dropped it (a continuous crawl's pass fetches the pages due, not all). Now the other
-- pages whose last parse listed a record are noted here, and only for such records: a
-- record of one page costs nothing more. When a page takes a record over from another
-- whose last parse listed it, that other page is noted (the trigger below); a page
-- parsed again that no longer lists a record is unnoted, and a record it held is handed
-- to a page still noted for it (store/core.py, queries unlist_dropped, hand_over): it is
-- marked gone only once no page lists it.
CREATE TABLE record_pages (
    crawl  TEXT    NOT NULL,
    record TEXT    NOT NULL,
    page   INTEGER NOT NULL,  -- a frontier id whose last parse listed the record
    PRIMARY KEY (crawl, record, page)
) WITHOUT ROWID;
CREATE INDEX record_pages_page ON record_pages (page);

-- The page a record leaves still lists it if its last fetch yielded the record (the
-- record was seen in that page's pass or later); the page it goes to is no longer "other".
CREATE TRIGGER records_page_moved AFTER UPDATE OF page ON records
WHEN OLD.page IS NOT NEW.page
BEGIN
    INSERT OR IGNORE INTO record_pages (crawl, record, page)
    SELECT OLD.crawl, OLD.id, OLD.page
    WHERE OLD.page IS NOT NULL AND OLD.gone_at IS NULL
      AND OLD.seen_pass >= (SELECT done_pass FROM frontier WHERE id = OLD.page);
    DELETE FROM record_pages
    WHERE crawl = NEW.crawl AND record = NEW.id AND page = NEW.page;
END;
