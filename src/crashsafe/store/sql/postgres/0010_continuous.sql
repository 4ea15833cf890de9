-- crashsafe schema, version 10 (PostgreSQL): continuous crawling (SQLite's 0012 says more).
ALTER TABLE frontier ADD COLUMN next_visit_at timestamptz;
UPDATE frontier SET next_visit_at = coalesce(done_at, 'epoch') WHERE state = 'done';
CREATE INDEX frontier_revisit ON frontier (crawl, next_visit_at) WHERE state = 'done';

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
