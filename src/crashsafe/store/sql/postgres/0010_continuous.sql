-- crashsafe schema, version 10 (PostgreSQL): continuous crawling (SQLite's 0012 says more).
ALTER TABLE frontier ADD COLUMN next_visit_at timestamptz;
UPDATE frontier SET next_visit_at = coalesce(done_at, 'epoch') WHERE state = 'done';
CREATE INDEX frontier_revisit ON frontier (crawl, next_visit_at) WHERE state = 'done';
CREATE INDEX frontier_pass ON frontier (crawl, done_pass) WHERE state = 'done';
CREATE INDEX records_page ON records (page);

CREATE TABLE pass_figures (
    crawl        text        NOT NULL,
    pass         integer     NOT NULL,
    started_at   timestamptz NOT NULL,
    finished_at  timestamptz NOT NULL,
    fetched      bigint      NOT NULL,
    not_modified bigint      NOT NULL,
    unchanged    bigint      NOT NULL,
    body_bytes   bigint      NOT NULL,
    created      bigint      NOT NULL,
    changed      bigint      NOT NULL,
    gone         bigint      NOT NULL,
    PRIMARY KEY (crawl, pass)
);

-- A record's first-version event written when it first changes only while its crawl has
-- no endpoint (SQLite's 0012 says why: a pruned one must not be sent twice).
CREATE OR REPLACE FUNCTION crashsafe_record_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NOT EXISTS (SELECT 1 FROM endpoints WHERE crawl = NEW.crawl) THEN
            RETURN NULL;
        END IF;
    ELSIF OLD.version = 1 THEN
        INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
        SELECT OLD.crawl, OLD.id, 1, 'record.created', OLD.url, OLD.data, OLD.last_changed
        WHERE NOT EXISTS (SELECT 1 FROM endpoints WHERE crawl = OLD.crawl)
          AND NOT EXISTS (SELECT 1 FROM outbox
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
