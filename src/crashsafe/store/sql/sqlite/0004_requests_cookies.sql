-- crashsafe schema, version 4 (SQLite): durable requests, cookies.

-- What it takes to send a request again exactly (method, headers, body, cookies, meta,
-- cb_kwargs) as JSON; NULL for a plain GET. A request that is not a plain GET is keyed
-- by its URL, '#' and a fingerprint of its method and body (crawl/requests.py): a
-- canonical URL has no fragment, so keys of plain GETs stay what they were.
ALTER TABLE frontier ADD COLUMN request TEXT;

-- Cookies the crawl's committed pages set, written in each page's transaction, replayed
-- in order into a restarted crawl's cookie jar. One row per (domain, path, name): the
-- last one set.
CREATE TABLE cookies (
    crawl  TEXT NOT NULL,
    domain TEXT NOT NULL,
    path   TEXT NOT NULL,
    name   TEXT NOT NULL,
    url    TEXT NOT NULL,   -- the URL whose response set it
    header TEXT NOT NULL,   -- its Set-Cookie value as received
    set_at REAL NOT NULL,
    PRIMARY KEY (crawl, domain, path, name)
) WITHOUT ROWID;

-- A counter per crawl, raised by every commit that stores cookies, and read by every
-- claim: a worker that leases a URL after another worker stored cookies (a login) sees
-- the counter moved and loads them before it fetches.
CREATE TABLE cookie_jars (
    crawl   TEXT    PRIMARY KEY,
    version INTEGER NOT NULL
) WITHOUT ROWID;
