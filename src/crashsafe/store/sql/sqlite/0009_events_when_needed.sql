-- crashsafe schema, version 9 (SQLite): a record's first version gets its outbox event
-- only while its crawl has a webhook endpoint; a crawl without one no longer writes each
-- record's data twice (its event cost a fifth of a page's commit).
--
-- Nothing is lost: an event can be missing only for a record still at version 1 (every
-- later version writes its event, and first the one of version 1 if it is missing), and
-- adding a crawl's first endpoint writes those (store/sql_effects.py, in the transaction
-- that adds it). Its version 1 is the record as stored, so the event holds what it would
-- have held. Figures count the events as the versions they are (one per version).

DROP TRIGGER records_created;
CREATE TRIGGER records_created AFTER INSERT ON records
WHEN EXISTS (SELECT 1 FROM endpoints WHERE crawl = NEW.crawl)
BEGIN
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    VALUES (NEW.crawl, NEW.id, NEW.version, 'record.created', NEW.url, NEW.data,
            NEW.last_changed);
END;

DROP TRIGGER records_changed;
CREATE TRIGGER records_changed AFTER UPDATE OF version ON records
WHEN NEW.version <> OLD.version
BEGIN
    -- The version it leaves, made while the crawl had no endpoint: its event first, so a
    -- record's history stays whole.
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    SELECT OLD.crawl, OLD.id, 1, 'record.created', OLD.url, OLD.data, OLD.last_changed
    WHERE OLD.version = 1 AND NOT EXISTS (
        SELECT 1 FROM outbox WHERE crawl = OLD.crawl AND record_id = OLD.id AND version = 1);
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    VALUES (NEW.crawl, NEW.id, NEW.version,
            CASE WHEN NEW.gone_at IS NULL THEN 'record.updated' ELSE 'record.gone' END,
            NEW.url, NEW.data, NEW.last_changed);
END;
