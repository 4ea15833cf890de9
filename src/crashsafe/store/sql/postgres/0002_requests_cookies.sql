-- crashsafe schema, version 2 (PostgreSQL): durable requests, cookies (SQLite's 0004).

-- What it takes to send a request again exactly, as JSON; NULL for a plain GET. A request
-- that is not a plain GET is keyed by its URL, '#' and a fingerprint of its method and
-- body (crawl/requests.py), so url_hash keeps serving as the key.
ALTER TABLE frontier ADD COLUMN request text;

-- Cookies the crawl's committed pages set, written in each page's transaction, replayed
-- in order into a restarted crawl's cookie jar; one row per (domain, path, name).
CREATE TABLE cookies (
    crawl  text        NOT NULL,
    domain text        NOT NULL,
    path   text        NOT NULL,
    name   text        NOT NULL,
    url    text        NOT NULL,
    header text        NOT NULL,
    set_at timestamptz NOT NULL,
    PRIMARY KEY (crawl, domain, path, name)
);

-- A counter per crawl, raised by every commit that stores cookies, returned with every
-- claim (see SQLite's 0004).
CREATE TABLE cookie_jars (
    crawl   text    PRIMARY KEY,
    version integer NOT NULL
);
