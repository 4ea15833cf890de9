-- crashsafe schema, version 10 (SQLite): what auto rendering learned (crawl/render.py).

-- Per URL pattern of a crawl, the pages committed done that were fine as fetched (http)
-- and those that needed the browser (browser), counted in each page's commit: a restarted
-- crawl renders the patterns that mostly needed the browser straight away.
CREATE TABLE render_patterns (
    crawl   TEXT NOT NULL,
    pattern TEXT NOT NULL,
    http    INTEGER NOT NULL DEFAULT 0,
    browser INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (crawl, pattern)
);
