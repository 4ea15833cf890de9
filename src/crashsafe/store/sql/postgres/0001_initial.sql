-- crashsafe schema, version 1 (PostgreSQL): the same tables as SQLite's version 3.
-- Every row is scoped by crawl name. Times are timestamptz in the database's clock.

-- The time a statement works with: the database's own (now(): the transaction's start),
-- unless the caller gives one (tests move an injected clock instead of sleeping).
CREATE FUNCTION crashsafe_now(injected double precision) RETURNS timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS 'SELECT coalesce(to_timestamp(injected), now())';

-- A group commit's fenced updates, sent without waiting for their counts: this checks
-- on the server that every page's lease was current (else the transaction aborts, and
-- the group is redone page by page).
CREATE FUNCTION crashsafe_fenced(marked bigint, expected integer) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF marked <> expected THEN
        RAISE EXCEPTION 'a lease of the group is no longer current' USING ERRCODE = 'CS409';
    END IF;
    RETURN marked;
END
$$;

CREATE TABLE frontier (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    crawl           text        NOT NULL,
    url             text        NOT NULL,          -- canonical form, up to 8 KiB
    -- B-tree entries are limited to about 2.7 kB: URLs are unique by their SHA-256, and
    -- found by origin (robots.txt holds an origin back; politeness counts per origin).
    -- Both are computed by enqueue_url (as generated columns, 48 links took twice as long).
    url_hash        bytea       NOT NULL,
    origin          text        NOT NULL,          -- scheme://host[:port]
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'leased', 'done', 'failed')),
    depth           integer     NOT NULL DEFAULT 0,
    callback        text,                          -- spider method name; NULL means parse
    priority        bigint      NOT NULL DEFAULT 0,-- higher is leased first
    lease_owner     text,
    lease_expires   timestamptz,
    grant_id        bigint,                        -- the lease_grants row of the current lease
    attempts        integer     NOT NULL DEFAULT 0,-- fetch outcomes recorded (not leases)
    next_attempt_at timestamptz NOT NULL DEFAULT 'epoch',
    http_status     integer,
    last_error      text,
    links_skipped   integer     NOT NULL DEFAULT 0,
    added_at        timestamptz NOT NULL,
    done_at         timestamptz,
    -- The hash first: this index must never look like a way to walk a crawl's rows.
    UNIQUE (url_hash, crawl)
);
-- Partial indexes: a row is in one only while in that state, so the many done rows
-- weigh on none, and a state change writes fewer index entries. Claims walk the first:
-- pending URLs by priority, then in the order they were found. It is the only index
-- that serves "pending rows of a crawl", so the plan of a claim cannot depend on how
-- fresh the table's statistics are (with a second one, a planner that thought the
-- table small sorted 40 000 pending rows for every claim of 16). An origin held back
-- for its robots.txt (rare) walks it too.
CREATE INDEX frontier_pending ON frontier (crawl, priority DESC, id) WHERE state = 'pending';
-- Leases: lapsed ones, a worker's, an origin's (politeness).
CREATE INDEX frontier_leased ON frontier (crawl, lease_owner) WHERE state = 'leased';

-- One row per lease granted, kept for good: repeated requests are computed from it.
-- outcome: NULL while in flight (or lost to a crash), then done | retry | failed |
-- skipped | deferred | released | abandoned | stale (see SQLite's 0001 and 0002).
CREATE TABLE lease_grants (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    crawl       text        NOT NULL,
    frontier_id bigint      NOT NULL,
    owner       text        NOT NULL,
    granted_at  timestamptz NOT NULL,
    outcome     text
);
CREATE INDEX lease_grants_crawl ON lease_grants (crawl, outcome);

CREATE TABLE records (
    crawl        text        NOT NULL,
    id           text        NOT NULL,             -- record_id(source, key)
    source       text        NOT NULL,
    key          text        NOT NULL,
    url          text,
    content_hash text        NOT NULL,
    data         jsonb       NOT NULL,
    first_seen   timestamptz NOT NULL,
    last_changed timestamptz NOT NULL,
    version      integer     NOT NULL DEFAULT 1,
    PRIMARY KEY (crawl, id)
);
CREATE INDEX records_changed ON records (crawl, last_changed);

-- robots.txt per origin, RFC 9309: the last copy read (body NULL: never read), the
-- failure state while it is unreachable, and the claim of the one worker fetching it.
CREATE TABLE robots (
    crawl         text        NOT NULL,
    origin        text        NOT NULL,
    body          text,
    fetched_at    timestamptz,
    failing_since timestamptz,
    failures      integer     NOT NULL DEFAULT 0,
    retry_at      timestamptz,
    claim_owner   text,
    claim_until   timestamptz,
    PRIMARY KEY (crawl, origin)
);

-- Every worker that registered. Its liveness lock is the session advisory lock
-- (classid = the schema's key, objid = id), held for the life of its connection.
CREATE TABLE workers (
    id         integer     GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner      text        NOT NULL UNIQUE,
    crawl      text        NOT NULL,
    host       text        NOT NULL,
    pid        integer     NOT NULL,
    started_at timestamptz NOT NULL
);

-- Per origin, what claims honour for all workers together: its robots.txt Crawl-delay,
-- and the time before which no URL of it is granted. Claims lock these rows while
-- they count an origin's leases.
CREATE TABLE hosts (
    crawl   text             NOT NULL,
    origin  text             NOT NULL,
    delay   double precision NOT NULL DEFAULT 0,
    next_at timestamptz      NOT NULL DEFAULT 'epoch',
    PRIMARY KEY (crawl, origin)
);
