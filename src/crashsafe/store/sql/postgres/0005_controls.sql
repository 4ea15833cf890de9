-- crashsafe schema, version 5 (PostgreSQL): steering running crawls, and who steered
-- them (SQLite's 0007 says more).
CREATE TABLE controls (
    crawl          text        PRIMARY KEY,
    paused_at      timestamptz,
    paused_by      text,
    origins_paused integer     NOT NULL DEFAULT 0
);

ALTER TABLE hosts ADD COLUMN paused_at timestamptz;
ALTER TABLE hosts ADD COLUMN paused_by text;

ALTER TABLE workers ADD COLUMN stop_asked_at timestamptz;
ALTER TABLE workers ADD COLUMN stop_asked_by text;

CREATE TABLE audit (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    crawl  text        NOT NULL,
    action text        NOT NULL,
    target text,
    actor  text        NOT NULL,
    at     timestamptz NOT NULL,
    detail text
);
CREATE INDEX audit_crawl ON audit (crawl, id);

CREATE INDEX outbox_record ON outbox (crawl, record_id, version);
