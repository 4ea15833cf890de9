-- crashsafe schema, version 8 (PostgreSQL): what auto rendering learned per URL pattern
-- (SQLite's 0010 says more).
CREATE TABLE render_patterns (
    crawl   text NOT NULL,
    pattern text NOT NULL,
    http    bigint NOT NULL DEFAULT 0,
    browser bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (crawl, pattern)
);
