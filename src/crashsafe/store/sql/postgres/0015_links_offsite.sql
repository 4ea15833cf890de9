-- crashsafe schema, version 15 (PostgreSQL): the links a page held outside the
-- allow-list, counted when it is done (SQLite's 0016). Pages done before count none.
ALTER TABLE frontier ADD COLUMN links_offsite integer NOT NULL DEFAULT 0;
