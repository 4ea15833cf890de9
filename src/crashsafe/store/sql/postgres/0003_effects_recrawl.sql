-- crashsafe schema, version 3 (PostgreSQL): recrawls, the outbox and its deliveries,
-- files (SQLite's 0005; the comments there say more).

-- The page that yielded a record last and in which pass; the pass a page was last done
-- in; when a record went gone (its page fetched in a later pass, and it found nowhere).
ALTER TABLE frontier ADD COLUMN done_pass integer NOT NULL DEFAULT 1;
ALTER TABLE records ADD COLUMN page bigint;
ALTER TABLE records ADD COLUMN seen_pass integer NOT NULL DEFAULT 1;
ALTER TABLE records ADD COLUMN gone_at timestamptz;
UPDATE records r SET page = f.id
FROM frontier f
WHERE f.crawl = r.crawl AND f.url_hash = sha256(convert_to(r.url, 'UTF8'));

CREATE TABLE passes (
    crawl      text        NOT NULL,
    pass       integer     NOT NULL,
    started_at timestamptz NOT NULL,
    requeued   bigint      NOT NULL,
    PRIMARY KEY (crawl, pass)
);

CREATE TABLE outbox (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    crawl     text        NOT NULL,
    record_id text        NOT NULL,
    version   integer     NOT NULL,
    type      text        NOT NULL
              CHECK (type IN ('record.created', 'record.updated', 'record.gone')),
    url       text,
    data      jsonb       NOT NULL,
    at        timestamptz NOT NULL
);

INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
SELECT crawl, id, version,
       CASE WHEN version = 1 THEN 'record.created' ELSE 'record.updated' END,
       url, data, last_changed
FROM records;

-- The outbox event of a record's new version, in the transaction that writes it.
CREATE FUNCTION crashsafe_record_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO outbox (crawl, record_id, version, type, url, data, at)
    VALUES (NEW.crawl, NEW.id, NEW.version,
            CASE WHEN TG_OP = 'INSERT' THEN 'record.created'
                 WHEN NEW.gone_at IS NULL THEN 'record.updated'
                 ELSE 'record.gone' END,
            NEW.url, NEW.data, NEW.last_changed);
    RETURN NULL;
END
$$;
CREATE TRIGGER records_created AFTER INSERT ON records
    FOR EACH ROW EXECUTE FUNCTION crashsafe_record_event();
-- The WHEN spares the function call for an update that keeps the version.
CREATE TRIGGER records_changed AFTER UPDATE OF version ON records
    FOR EACH ROW WHEN (NEW.version <> OLD.version) EXECUTE FUNCTION crashsafe_record_event();

CREATE TABLE endpoints (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    crawl        text        NOT NULL,
    url          text        NOT NULL,
    added_at     timestamptz NOT NULL,
    disabled_at  timestamptz,
    disabled_why text,
    UNIQUE (crawl, url)
);

CREATE TABLE deliveries (
    endpoint        bigint      NOT NULL,
    event           bigint      NOT NULL,
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'leased', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    leases          integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT 'epoch',
    lease_owner     text,
    lease_expires   timestamptz,
    last_status     integer,
    last_error      text,
    done_at         timestamptz,
    PRIMARY KEY (endpoint, event)
);
CREATE INDEX deliveries_due ON deliveries (endpoint, state, next_attempt_at);

-- Every event is due to every endpoint of its crawl. A writer runs at READ COMMITTED, so
-- this reads the endpoints committed when it runs; add_endpoint locks the outbox against
-- writers while it adds one and its backlog, so no event falls between the two.
CREATE FUNCTION crashsafe_fan_out() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO deliveries (endpoint, event)
    SELECT e.id, NEW.id FROM endpoints e WHERE e.crawl = NEW.crawl;
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_fan_out AFTER INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION crashsafe_fan_out();

CREATE TABLE files (
    crawl        text        NOT NULL,
    sha256       text        NOT NULL,
    size         bigint      NOT NULL,
    content_type text,
    url          text        NOT NULL,
    stored_at    timestamptz NOT NULL,
    PRIMARY KEY (crawl, sha256)
);
