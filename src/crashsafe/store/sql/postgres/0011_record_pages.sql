-- crashsafe schema, version 11 (PostgreSQL): a record on several pages is gone only when
-- no page lists it any more (SQLite's 0013 says more).
CREATE TABLE record_pages (
    crawl  text   NOT NULL,
    record text   NOT NULL,
    page   bigint NOT NULL,  -- a frontier id whose last parse listed the record
    PRIMARY KEY (crawl, record, page)
);
CREATE INDEX record_pages_page ON record_pages (page);

CREATE FUNCTION crashsafe_record_page_moved() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.page IS NOT NULL AND OLD.gone_at IS NULL
       AND OLD.seen_pass >= (SELECT done_pass FROM frontier WHERE id = OLD.page) THEN
        INSERT INTO record_pages (crawl, record, page) VALUES (OLD.crawl, OLD.id, OLD.page)
        ON CONFLICT DO NOTHING;
    END IF;
    DELETE FROM record_pages WHERE crawl = NEW.crawl AND record = NEW.id AND page = NEW.page;
    RETURN NULL;
END
$$;
CREATE TRIGGER records_page_moved AFTER UPDATE OF page ON records
    FOR EACH ROW WHEN (OLD.page IS DISTINCT FROM NEW.page)
    EXECUTE FUNCTION crashsafe_record_page_moved();
