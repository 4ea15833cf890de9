-- crashsafe schema, version 7 (PostgreSQL): a record's first version gets its outbox
-- event only while its crawl has a webhook endpoint (SQLite's 0009 says why and why
-- nothing is lost).
--
-- A page commit and the addition of a crawl's first endpoint must not miss each other:
-- add_endpoint locks the records table against writers (SHARE ROW EXCLUSIVE: it waits
-- for the commits writing records now, and holds new ones back) while it writes the
-- missing events and adds the endpoint. Every commit that writes a record either ended
-- before (its records are then seen and their events written) or starts its write after
-- (at READ COMMITTED its statement, and this function's query, then read the endpoint).
CREATE OR REPLACE FUNCTION crashsafe_record_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NOT EXISTS (SELECT 1 FROM endpoints WHERE crawl = NEW.crawl) THEN
            RETURN NULL;
        END IF;
    ELSIF OLD.version = 1 THEN
        -- The version it leaves, made while the crawl had no endpoint: its event first.
        INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
        SELECT OLD.crawl, OLD.id, 1, 'record.created', OLD.url, OLD.data, OLD.last_changed
        WHERE NOT EXISTS (SELECT 1 FROM outbox
                          WHERE crawl = OLD.crawl AND record_id = OLD.id AND version = 1);
    END IF;
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    VALUES (NEW.crawl, NEW.id, NEW.version,
            CASE WHEN TG_OP = 'INSERT' THEN 'record.created'
                 WHEN NEW.gone_at IS NULL THEN 'record.updated'
                 ELSE 'record.gone' END,
            NEW.url, NEW.data, NEW.last_changed);
    RETURN NULL;
END
$$;
